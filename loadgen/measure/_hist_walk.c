/* loadgen.measure._hist_walk: one pass over an HDR histogram's counts for the Prometheus exporter.
 *
 * Why: a cold scrape of 10 variants x 5 mixes walks 200 histograms of ~3,000-9,000 recorded slots each; numpy
 * needs a cumulative sum, a product and a sum over each (and ~1 us per call on top), ~15 us a histogram, most of a
 * 10 ms budget. This loop does all of it in one pass: ~10x less. loadgen/measure/hist_walk.py holds the numpy path
 * it must equal (tests/unit/test_hist_walk.py checks both on every case).
 *
 * walk(counts, lo, hi, ends, median, ranks) -> (buckets, recorded, total, positions)
 *   counts  buffer of int64: the histogram's counts array (read in place)
 *   lo, hi  the first and last slot to walk (the slots of the lowest and highest recorded value)
 *   ends    buffer of int64, ascending: per bucket bound, how many slots from index 0 count in it
 *   median  buffer of int64: each slot's median equivalent value (us)
 *   ranks   ascending ints >= 1: the sample ranks of the quantiles
 * buckets[k] = samples in slots [lo, ends[k]); recorded = samples in [lo, hi]; total = sum of count x median;
 * positions[j] = the first slot whose running count reaches ranks[j], or -1 past hi (a censored rank).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

static int get_int64_buffer(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len % 8 != 0) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer of 8-byte integers, got %zd bytes", what, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *counts_obj, *ends_obj, *median_obj, *ranks_obj;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "OnnOOO", &counts_obj, &lo, &hi, &ends_obj, &median_obj, &ranks_obj))
        return NULL;
    Py_buffer cb, eb, mb;
    if (get_int64_buffer(counts_obj, &cb, "counts") < 0)
        return NULL;
    if (get_int64_buffer(ends_obj, &eb, "ends") < 0) {
        PyBuffer_Release(&cb);
        return NULL;
    }
    if (get_int64_buffer(median_obj, &mb, "median") < 0) {
        PyBuffer_Release(&cb);
        PyBuffer_Release(&eb);
        return NULL;
    }
    PyObject *result = NULL, *buckets = NULL, *positions = NULL, *ranks_seq = NULL;
    int64_t *rank_values = NULL;
    Py_ssize_t n_slots = cb.len / 8, n_ends = eb.len / 8, nr = 0;
    if (lo < 0 || hi < lo || hi >= n_slots || mb.len / 8 < n_slots) {
        PyErr_Format(PyExc_ValueError, "slots %zd..%zd outside the %zd counts (or fewer median values)", lo, hi,
                     n_slots);
        goto done;
    }
    ranks_seq = PySequence_Fast(ranks_obj, "ranks: a sequence of ints");
    if (ranks_seq == NULL)
        goto done;
    nr = PySequence_Fast_GET_SIZE(ranks_seq);
    rank_values = PyMem_Malloc(sizeof(int64_t) * (size_t)(nr > 0 ? nr : 1));
    if (rank_values == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < nr; j++) {
        long long r = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(ranks_seq, j));
        if (r == -1 && PyErr_Occurred())
            goto done;
        if (r < 1 || (j > 0 && r < rank_values[j - 1])) {
            PyErr_SetString(PyExc_ValueError, "ranks must be ascending and >= 1");
            goto done;
        }
        rank_values[j] = r;
    }
    const int64_t *counts = (const int64_t *)cb.buf, *ends = (const int64_t *)eb.buf, *median = (const int64_t *)mb.buf;
    for (Py_ssize_t k = 1; k < n_ends; k++) {
        if (ends[k] < ends[k - 1]) {
            PyErr_SetString(PyExc_ValueError, "ends must be ascending");
            goto done;
        }
    }
    buckets = PyList_New(n_ends);
    positions = PyList_New(nr);
    if (buckets == NULL || positions == NULL)
        goto done;
    int64_t cum = 0, total = 0;
    Py_ssize_t e = 0, q = 0;
    /* The next bound and the next rank in registers: the loop body is then two loads, a multiply, two adds and two
     * compares that are almost never true (well predicted), rather than a load and test of the arrays per slot. */
    int64_t next_end = n_ends > 0 ? ends[0] : INT64_MAX, next_rank = nr > 0 ? rank_values[0] : INT64_MAX;
    for (Py_ssize_t s = lo; s <= hi; s++) {
        if (s >= next_end) { /* bounds that end below slot s: what is counted so far */
            do {
                PyList_SET_ITEM(buckets, e, PyLong_FromLongLong(cum));
                e++;
            } while (e < n_ends && ends[e] <= s);
            next_end = e < n_ends ? ends[e] : INT64_MAX;
        }
        int64_t c = counts[s];
        cum += c;
        total += c * median[s];
        if (cum >= next_rank) { /* ranks this slot reaches */
            do {
                PyList_SET_ITEM(positions, q, PyLong_FromSsize_t(s));
                q++;
            } while (q < nr && cum >= rank_values[q]);
            next_rank = q < nr ? rank_values[q] : INT64_MAX;
        }
    }
    for (; e < n_ends; e++)
        PyList_SET_ITEM(buckets, e, PyLong_FromLongLong(cum));
    for (; q < nr; q++)
        PyList_SET_ITEM(positions, q, PyLong_FromLong(-1));
    for (Py_ssize_t k = 0; k < n_ends; k++)
        if (PyList_GET_ITEM(buckets, k) == NULL)
            goto done;
    for (Py_ssize_t j = 0; j < nr; j++)
        if (PyList_GET_ITEM(positions, j) == NULL)
            goto done;
    result = Py_BuildValue("(OLLO)", buckets, (long long)cum, (long long)total, positions);
done:
    Py_XDECREF(buckets);
    Py_XDECREF(positions);
    Py_XDECREF(ranks_seq);
    PyMem_Free(rank_values);
    PyBuffer_Release(&cb);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&mb);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(counts, lo, hi, ends, median, ranks) -> (buckets, recorded, total, positions): one pass over slots lo..hi"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hist_walk", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hist_walk(void) { return PyModule_Create(&module); }
