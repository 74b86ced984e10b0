/* loadgen.measure._record: recording a finished request's values into its group's latency histograms, one call.
 *
 * Why: a worker records every finished request into its (variant, mix) group, its slices and its classes: a few
 * latencies each (TTFT, E2E, TPOT, ...) and one ITL and ICL sample per chunk gap. In Python that is a method call,
 * a bucket index, a window check and three attribute updates per value, and a dict of counts per stream; here one
 * call per group does it in place, in the histograms' own counts arrays (ctypes int64 arrays with a window offset,
 * loadgen/measure/histogram.py). Python still decides everything: which values a request has and which metrics its
 * fate censors (loadgen/measure/fates.py); this only adds the values it is handed. loadgen/measure/recording.py holds
 * the Python equal (`record_values_python`); tests/unit/test_record_values.py holds both identical on every case
 * (empty, one chunk, k-token chunks, negative and huge gaps, window growth, NaN and infinity).
 *
 * configure(hist_type, layout_key, unit_magnitude, sub_bucket_half_count_magnitude, highest, gaps_python)
 *   hist_type   LatencyHistogram: only histograms of exactly this type and of the layout `layout_key`
 *               ((lowest, highest, digits) of `_lay.key`) are written in place; any other is handed to its own
 *               `record` (values) or to `gaps_python` (chunk gaps), unchanged.
 * record(hists, make, names, values, times, tokens)
 *   for each name with a value that is not None: the histogram `hists[name]` (`make(name)` creates it when absent)
 *   records the value (seconds), as LatencyHistogram.record does; then, when `times` is not None and holds two
 *   chunk times or more, hists "itl" and "icl" record its chunk gaps, as chunk_gaps.record_chunk_gaps does.
 * gaps(itl, icl, times, tokens)
 *   record_chunk_gaps in C (times: array('d'), tokens: array('l'); anything else goes to `gaps_python`).
 *
 * A value is converted as Python's int(seconds * 1e6 + 0.5) (truncation; NaN raises ValueError, an infinite product
 * OverflowError, before anything is added), then clamped to 0 ... highest. Compiled with -ffp-contract=off: the
 * multiply and add round as Python's do.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>

static PyObject *hist_type = NULL;  /* LatencyHistogram */
static PyObject *layout_key = NULL; /* (lowest, highest, digits) */
static PyObject *gaps_python = NULL;
static PyObject *layout_ok = NULL; /* the Layout object checked to be `layout_key` and our index arithmetic */
static int unit_mag, half_mag, shift0;
static uint64_t sub_mask;
static int64_t half_count, highest;

static PyObject *s_lay, *s_counts, *s_off, *s_total, *s_min, *s_max, *s_record, *s_key, *s_itl, *s_icl;

static inline int64_t slot_of(int64_t v) {
    int b = 64 - __builtin_clzll((uint64_t)v | sub_mask) - shift0;
    return ((int64_t)(b + 1) << half_mag) + (v >> (b + unit_mag)) - half_count;
}

/* int(seconds * 1e6 + 0.5) clamped to 0 ... highest; -1 with an exception set as Python's int() raises it. */
static int us_of(double seconds, int64_t *out) {
    double x = seconds * 1e6 + 0.5;
    if (isnan(x)) {
        PyErr_SetString(PyExc_ValueError, "cannot convert float NaN to integer");
        return -1;
    }
    if (isinf(x)) {
        PyErr_SetString(PyExc_OverflowError, "cannot convert float infinity to integer");
        return -1;
    }
    int64_t us;
    if (x >= 9223372036854775808.0)
        us = highest;
    else if (x <= -9223372036854775808.0)
        us = 0;
    else
        us = (int64_t)x;
    if (us < 0)
        us = 0;
    else if (us > highest)
        us = highest;
    *out = us;
    return 0;
}

/* `v` (a new reference, or NULL with an error set: it is released) as an int64 in *out: 0, or -1 on an error. */
static int take_i64(PyObject *v, int64_t *out) {
    if (v == NULL)
        return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

/* 1: the layout's own `index(v)` is the slot this module computes for v; 0: it is not; -1: an error. */
static int index_agrees(PyObject *lay, int64_t v) {
    int64_t got;
    if (take_i64(PyObject_CallMethod(lay, "index", "L", (long long)v), &got) < 0)
        return -1;
    return got == slot_of(v);
}

/* 1: a histogram this module writes in place; 0: not (its own methods record it); -1: an error. */
static int ours(PyObject *h) {
    if (hist_type == NULL || (PyObject *)Py_TYPE(h) != hist_type)
        return 0;
    PyObject *lay = PyObject_GetAttr(h, s_lay);
    if (lay == NULL)
        return -1;
    if (lay == layout_ok) {
        Py_DECREF(lay);
        return 1;
    }
    /* A layout not seen yet: ours when its key is, and its own index function agrees with ours (checked once). */
    int ok = 0;
    PyObject *key = PyObject_GetAttr(lay, s_key);
    if (key == NULL)
        goto fail;
    ok = PyObject_RichCompareBool(key, layout_key, Py_EQ);
    Py_DECREF(key);
    if (ok < 0)
        goto fail;
    if (ok && layout_ok == NULL) {
        static const int64_t probes[] = {0, 1, 2047, 2048, 4095, 4096, 65535, 65536, 123456, 1000000007};
        for (size_t i = 0; ok == 1 && i < sizeof probes / sizeof probes[0]; i++)
            ok = index_agrees(lay, probes[i]);
        if (ok == 1)
            ok = index_agrees(lay, highest);
        if (ok < 0)
            goto fail;
        if (ok) {
            Py_INCREF(lay);
            layout_ok = lay;
        }
    } else if (ok) {
        ok = 0; /* another Layout object of the same key: not expected (layout_for keeps one); Python records it */
    }
    Py_DECREF(lay);
    return ok;
fail:
    Py_DECREF(lay);
    return -1;
}

static int get_i64(PyObject *obj, PyObject *name, int64_t *out) {
    return take_i64(PyObject_GetAttr(obj, name), out);
}

static int set_i64(PyObject *obj, PyObject *name, int64_t value) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int r = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return r;
}

/* A histogram's counts window held open for adding: slots lo ... hi covered (grown by its `_cover` when not). */
typedef struct {
    Py_buffer view;
    int64_t *counts;
    int64_t off;
} Window;

static int window_open(PyObject *h, int64_t lo, int64_t hi, Window *w) {
    PyObject *counts = PyObject_GetAttr(h, s_counts);
    if (counts == NULL)
        return -1;
    int64_t off;
    if (get_i64(h, s_off, &off) < 0) {
        Py_DECREF(counts);
        return -1;
    }
    int covered = 0;
    if (counts != Py_None) {
        Py_ssize_t n = PyObject_Length(counts);
        if (n < 0) {
            Py_DECREF(counts);
            return -1;
        }
        covered = lo >= off && hi < off + n;
    }
    if (!covered) {
        Py_DECREF(counts);
        counts = PyObject_CallMethod(h, "_cover", "LL", (long long)lo, (long long)hi);
        if (counts == NULL || get_i64(h, s_off, &off) < 0) {
            Py_XDECREF(counts);
            return -1;
        }
    }
    int r = PyObject_GetBuffer(counts, &w->view, PyBUF_WRITABLE);
    Py_DECREF(counts); /* (the buffer holds the array while the window is open) */
    if (r < 0)
        return -1;
    if (lo < off || (hi - off + 1) * 8 > w->view.len) {
        PyBuffer_Release(&w->view);
        PyErr_SetString(PyExc_RuntimeError, "_record: a histogram's window does not cover the slots it was grown to");
        return -1;
    }
    w->counts = (int64_t *)w->view.buf;
    w->off = off;
    return 0;
}

/* Close a window after adding `n` samples of values lo_us ... hi_us: LatencyHistogram._note's bookkeeping. */
static int window_close(PyObject *h, Window *w, int64_t n, int64_t lo_us, int64_t hi_us) {
    PyBuffer_Release(&w->view);
    int64_t total, mn, mx;
    if (get_i64(h, s_total, &total) < 0 || get_i64(h, s_min, &mn) < 0 || get_i64(h, s_max, &mx) < 0)
        return -1;
    if (set_i64(h, s_total, total + n) < 0)
        return -1;
    if (lo_us < mn && set_i64(h, s_min, lo_us) < 0)
        return -1;
    if (hi_us > mx && set_i64(h, s_max, hi_us) < 0)
        return -1;
    return 0;
}

static int record_one(PyObject *h, PyObject *value) {
    int mine = ours(h);
    if (mine < 0)
        return -1;
    if (!mine) {
        PyObject *r = PyObject_CallMethodOneArg(h, s_record, value);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    double seconds = PyFloat_AsDouble(value);
    if (seconds == -1.0 && PyErr_Occurred())
        return -1;
    int64_t us;
    if (us_of(seconds, &us) < 0)
        return -1;
    int64_t slot = slot_of(us);
    Window w;
    if (window_open(h, slot, slot, &w) < 0)
        return -1;
    w.counts[slot - w.off] += 1;
    return window_close(h, &w, 1, us, us);
}

static PyObject *call_gaps_python(PyObject *itl, PyObject *icl, PyObject *times, PyObject *tokens) {
    if (gaps_python == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_record: configure() was not called");
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(gaps_python, itl, icl, times, tokens, NULL);
}

static int is_format(const Py_buffer *v, const char *a, const char *b) {
    const char *f = v->format;
    if (f == NULL)
        return 0;
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    return v->itemsize == 8 && v->ndim == 1 && (strcmp(f, a) == 0 || (b != NULL && strcmp(f, b) == 0));
}

/* record_chunk_gaps; 1 when done here, 0 when the caller is to hand it to Python, -1 on an error. */
static int gaps_c(PyObject *itl, PyObject *icl, PyObject *times, PyObject *tokens) {
    if (itl == icl)
        return 0;
    int a = ours(itl);
    if (a <= 0)
        return a;
    int b = ours(icl);
    if (b <= 0)
        return b;
    if (!PyObject_CheckBuffer(times) || !PyObject_CheckBuffer(tokens))
        return 0;
    Py_buffer tv, kv;
    if (PyObject_GetBuffer(times, &tv, PyBUF_FORMAT | PyBUF_ND) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (PyObject_GetBuffer(tokens, &kv, PyBUF_FORMAT | PyBUF_ND) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&tv);
        return 0;
    }
    int result = 0;
    if (!is_format(&tv, "d", NULL) || !is_format(&kv, "l", "q") || tv.len != kv.len)
        goto done;
    result = -1;
    Py_ssize_t n = tv.len / 8;
    const double *t = (const double *)tv.buf;
    const int64_t *k = (const int64_t *)kv.buf;
    if (n < 2) {
        result = 1;
        goto done;
    }
    /* First the extremes (and any value Python's int() refuses, before anything is added), then the counts. */
    int64_t lo_c = INT64_MAX, hi_c = -1, lo_i = INT64_MAX, hi_i = -1, tok_total = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        double g = t[i] - t[i - 1];
        int64_t us;
        if (us_of(g, &us) < 0)
            goto done;
        if (us < lo_c)
            lo_c = us;
        if (us > hi_c)
            hi_c = us;
        int64_t kk = k[i];
        if (kk <= 0)
            continue;
        if (kk != 1 && us_of(g / (double)kk, &us) < 0)
            goto done;
        tok_total += kk;
        if (us < lo_i)
            lo_i = us;
        if (us > hi_i)
            hi_i = us;
    }
    Window wc, wi = {0};
    if (window_open(icl, slot_of(lo_c), slot_of(hi_c), &wc) < 0)
        goto done;
    int with_itl = hi_i >= 0;
    if (with_itl && window_open(itl, slot_of(lo_i), slot_of(hi_i), &wi) < 0) {
        PyBuffer_Release(&wc.view);
        goto done;
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        double g = t[i] - t[i - 1];
        int64_t us;
        us_of(g, &us); /* (checked above) */
        wc.counts[slot_of(us) - wc.off] += 1;
        int64_t kk = k[i];
        if (kk <= 0)
            continue;
        if (kk != 1)
            us_of(g / (double)kk, &us);
        wi.counts[slot_of(us) - wi.off] += kk;
    }
    if (window_close(icl, &wc, n - 1, lo_c, hi_c) < 0) {
        if (with_itl)
            PyBuffer_Release(&wi.view);
        goto done;
    }
    if (with_itl && window_close(itl, &wi, tok_total, lo_i, hi_i) < 0)
        goto done;
    result = 1;
done:
    PyBuffer_Release(&tv);
    PyBuffer_Release(&kv);
    return result;
}

static PyObject *gaps(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "gaps(itl, icl, times, tokens)");
        return NULL;
    }
    int r = gaps_c(args[0], args[1], args[2], args[3]);
    if (r < 0)
        return NULL;
    if (r == 0)
        return call_gaps_python(args[0], args[1], args[2], args[3]);
    Py_RETURN_NONE;
}

/* hists[name], made by make(name) when absent: a new reference. */
static PyObject *hist_of(PyObject *hists, PyObject *make, PyObject *name) {
    PyObject *h = PyDict_GetItemWithError(hists, name);
    if (h != NULL) {
        Py_INCREF(h);
        return h;
    }
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(make, name);
}

static PyObject *record(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 4 || nargs > 6) {
        PyErr_SetString(PyExc_TypeError, "record(hists, make, names, values, times=None, tokens=())");
        return NULL;
    }
    PyObject *hists = args[0], *make = args[1], *names = args[2], *values = args[3];
    PyObject *times = nargs > 4 ? args[4] : Py_None, *tokens = nargs > 5 ? args[5] : NULL;
    if (!PyDict_Check(hists) || !PyTuple_Check(names) || !PyTuple_Check(values) ||
        PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(values)) {
        PyErr_SetString(PyExc_TypeError, "record: a dict, a callable, and two tuples of the same length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *v = PyTuple_GET_ITEM(values, i);
        if (v == Py_None)
            continue;
        PyObject *h = hist_of(hists, make, PyTuple_GET_ITEM(names, i));
        if (h == NULL)
            return NULL;
        int r = record_one(h, v);
        Py_DECREF(h);
        if (r < 0)
            return NULL;
    }
    if (times == Py_None)
        Py_RETURN_NONE;
    Py_ssize_t n = PyObject_Length(times);
    if (n < 0)
        return NULL;
    if (n < 2)
        Py_RETURN_NONE;
    if (tokens == NULL) {
        PyErr_SetString(PyExc_TypeError, "record: chunk times without their tokens");
        return NULL;
    }
    PyObject *itl = hist_of(hists, make, s_itl);
    if (itl == NULL)
        return NULL;
    PyObject *icl = hist_of(hists, make, s_icl);
    if (icl == NULL) {
        Py_DECREF(itl);
        return NULL;
    }
    int r = gaps_c(itl, icl, times, tokens);
    PyObject *out = NULL;
    if (r == 1) {
        Py_INCREF(Py_None);
        out = Py_None;
    } else if (r == 0) {
        out = call_gaps_python(itl, icl, times, tokens);
    }
    Py_DECREF(itl);
    Py_DECREF(icl);
    return out;
}

static PyObject *configure(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *type, *key, *fallback;
    int unit, half;
    long long top;
    if (!PyArg_ParseTuple(args, "OO!iiLO", &type, &PyTuple_Type, &key, &unit, &half, &top, &fallback))
        return NULL;
    if (unit < 0 || half < 1 || unit + half > 40 || top <= 0) {
        PyErr_SetString(PyExc_ValueError, "configure: a layout's magnitudes out of range");
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(hist_type, type);
    Py_INCREF(key);
    Py_XSETREF(layout_key, key);
    Py_INCREF(fallback);
    Py_XSETREF(gaps_python, fallback);
    Py_CLEAR(layout_ok);
    unit_mag = unit;
    half_mag = half;
    shift0 = unit + half + 1;
    sub_mask = (((uint64_t)1 << (half + 1)) - 1) << unit;
    half_count = (int64_t)1 << half;
    highest = top;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "The histogram type, layout and Python chunk-gap recorder to follow."},
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL, "Record a request's values into its histograms."},
    {"gaps", (PyCFunction)(void (*)(void))gaps, METH_FASTCALL, "Record one stream's chunk gaps (ITL, ICL)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record(void) {
    struct {
        PyObject **at;
        const char *s;
    } names[] = {{&s_lay, "_lay"}, {&s_counts, "_counts"}, {&s_off, "_off"},       {&s_total, "_total"},
                 {&s_min, "_min"}, {&s_max, "_max"},       {&s_record, "record"}, {&s_key, "key"},
                 {&s_itl, "itl"},  {&s_icl, "icl"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (*names[i].at == NULL && (*names[i].at = PyUnicode_InternFromString(names[i].s)) == NULL)
            return NULL;
    }
    return PyModule_Create(&module);
}
