/* loadgen.measure._hist_merge: add one wire histogram (hdrh's V2 payload: raw as the wire carries it, or base64 +
 * zlib as hdrh encodes it) straight into the counts arrays of the histograms it merges into, without decoding it to
 * objects or to a scratch array first.
 *
 * Why: the master adds every worker's every histogram; in Python a blob costs ~10 calls (base64, two header unpacks,
 * zlib, hdrh's decode into a scratch array, the add, zeroing the scratch again). Here it is one call: the ZigZag
 * LEB128 counts (after base64 and inflate, for encode()'s form) are read in one pass that finds the slots with
 * counts, a second that adds them.
 *
 * merge_v2(blob, lowest, highest, digits, counts_len, targets) -> (status, total, lo, hi)
 *   blob     bytes: LatencyHistogram.wire()'s form (the raw payload); bytes or str: encode()'s (base64 of the
 *            compressed payload) or base64 of the raw payload (the wire's bytes as aggregate.json holds them)
 *   lowest, highest, digits, counts_len: the layout the targets are of (the blob must be of the same, offset 0)
 *   targets  sequence of (counts, off): a writable buffer of int64 holding slots off .. off + len - 1, or None
 * status 0: added to every target (total, the first and the last slot with a count; total 0: nothing to add).
 * status 1: a target's window does not hold slots lo .. hi: nothing added; grow it and call again.
 * status 2: not a form this reads (another layout, a non-zero normalizing offset, characters outside the base64
 *           alphabet, a corrupt payload, a count outside the layout): nothing added;
 *           the caller takes its Python path, which maps another layout or says what is wrong.
 *
 * merge_many(items, start, lay, lowest, highest, digits, counts_len, lowest_at, highest_at) -> int
 *   items[start:], each (blob, histograms): merge_v2 of the blob into the LatencyHistograms (of layout `lay`) and
 *   their total, min and max noted, as merge_encoded_into does — a group's histograms in one call, no Python per
 *   histogram. Stops at the first item it cannot merge (a histogram of another layout, a window to grow, status 2)
 *   and answers its index, having added nothing of it (-1: all merged); the caller merges that one and calls again
 *   from the next, so items end as merged one by one.
 * loadgen/measure/hist_merge.py `merge_encoded_into` is the Python path it must equal (tests/unit/test_hist_merge.py
 * holds both equal on every case).
 *
 * wire_items(targets, hists, alias, make) -> list | None   (merge_stats' first part; the tests call it alone)
 *   A stats object's wire histograms as merge_many's items: (blob, (histogram,)) per metric of the dict `hists`, its
 *   histogram targets[metric] (the object's own dict; make(metric) creates and stores one it lacks); with a non-empty
 *   `alias` (metric -> the metric whose blob it shares), (blob, [histogram, its aliases' …]). None when `hists` or a
 *   true `alias` is not a dict: the caller's Python path then says what is wrong.
 * add_fields(obj, wire, kinds, add_counts) -> None
 *   For each (name, value) of the dict `wire`, in its order, with a true value: kinds[name] 0, a counter:
 *   obj.name += int(value); 1, counts: add_counts(obj.name, value) (two dicts added in C: into[k] = into.get(k, 0) + v).
 *   Names kinds lacks are not fields (the histograms, their aliases).
 * merge_stats(obj, wire, kinds, add_counts, make, use_alias, lay, lowest, highest, digits, counts_len, lowest_at,
 *             highest_at) -> None | (items, index) | False
 *   The three in one call: wire_items of wire["hists"] (and wire["alias"] where use_alias) into obj.hists, those
 *   items merged as merge_many merges them, then add_fields. None: all done. (items, index): items before `index`
 *   merged, the one at it left as merge_many leaves one; the caller goes on from it, then adds the fields. False:
 *   nothing done, a form for the Python path (obj.hists or wire["hists"] no dict, a true alias no dict).
 * loadgen/measure/wire_fields.py holds the Python path both must equal (tests/unit/test_wire_fields.py).
 *
 * merge_rows(into, rows, start, nkey, new, kinds, add_counts, use_alias, lay, lowest, highest, digits, counts_len,
 *            lowest_at, highest_at) -> (index, items, stop)
 *   A delta's rows of one kind (its groups, its buckets, ...) in one call: each row of the list rows[start:], a list
 *   [*key, wire] with a key of nkey items (nkey -1: any), merged as merge_stats merges `wire` into the dict into's
 *   object at tuple(key) (new() made and stored where absent; its `_hist` makes a histogram it lacks), the slot values
 *   held once for all. (-1, None, None): every row merged. (index, None, None): the row at index left whole, nothing
 *   of it merged (a row that is no list or of another length, an unhashable key, a wire that is no dict or a form
 *   merge_stats hands back whole): the caller's Python path merges it (or says what is wrong). (index, items, stop):
 *   that row's histograms merged up to items[stop], which the caller merges on from, then adds the row's fields.
 *   Either way the caller calls again from index + 1. wire_fields.merge_rows is its caller and Python path.
 *
 * merge_bin_pairs(hist, flat) -> bool
 *   A timeline bin's histogram (measure/bin_histogram.py) merged from its wire form, (bucket, count, …) in a list:
 *   the window grown by hist._add(lowest, 0) and hist._add(highest, 0), then each count added into hist.counts (an
 *   array of 'I') in order, an add past 2**32 - 1 raising the array's own OverflowError where the Python loop would.
 *   False, having changed nothing, for a form it leaves to `BinHistogram.merge_wire`'s Python path (an item that is
 *   no int, a count below 0 or past 2**32 - 1, a bucket past +-2**40); tests/unit/test_bin_histogram.py holds both
 *   equal.
 *
 * admit_rows(keys, columns, ncolumns, width, level, seen) -> (kept, keys, columns) | None
 *   A variant's packed rows of a hash sample (measure/hash_sample.py `RowSample.merge_rows_wire`): int64 key hashes
 *   and `ncolumns` columns of `width` values per key, raw bytes as msgpack carries them. The keys under the level's
 *   threshold (2**(63 - level)) are kept: each counted in `seen` (a list of 64 counts, at 63 - its bit length), and
 *   answered with their rows as bytes for the rows' arrays. None, having changed nothing, for what the Python path
 *   must read or reject (base64 text, a length that is no whole int64, too few columns or values, a key below 0);
 *   tests/unit/test_hash_sample.py holds both equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define V2_COMPRESSION_COOKIE 0x1C849304u
#define V2_ENCODING_COOKIE 0x1C849303u
#define PAYLOAD_HEADER 40 /* cookie, length, normalizing offset, digits (4 bytes each), lowest, highest (8 each) */
#define MAX_TARGETS 8
#define RAW_FIRST 0x1C /* the first byte of a raw payload (its cookie's); never a base64 character */

/* Reused between calls (the GIL is held throughout): the base64-decoded blob and the inflated payload. */
static uint8_t *raw_buf = NULL, *out_buf = NULL, *slot_buf = NULL;
static size_t raw_cap = 0, out_cap = 0, slot_cap = 0;

static int reserve(uint8_t **buf, size_t *cap, size_t n) {
    if (*cap >= n)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < n)
        c *= 2;
    uint8_t *p = PyMem_Realloc(*buf, c);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *buf = p;
    *cap = c;
    return 0;
}

static int8_t b64_value[256];

static void b64_init(void) {
    memset(b64_value, -1, sizeof(b64_value));
    const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; i++)
        b64_value[(uint8_t)alphabet[i]] = (int8_t)i;
}

/* Strict base64 (padding only at the end): the decoded length, or -1 when the text is not that. */
static Py_ssize_t b64_decode(const uint8_t *s, Py_ssize_t n, uint8_t *out) {
    if (n % 4 != 0)
        return -1;
    Py_ssize_t pad = 0;
    if (n >= 1 && s[n - 1] == '=')
        pad++;
    if (n >= 2 && s[n - 2] == '=')
        pad++;
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int8_t a = b64_value[s[i]], b = b64_value[s[i + 1]];
        int8_t c = (last && pad >= 2) ? 0 : b64_value[s[i + 2]];
        int8_t d = (last && pad >= 1) ? 0 : b64_value[s[i + 3]];
        if ((a | b | c | d) < 0)
            return -1;
        uint32_t v = ((uint32_t)a << 18) | ((uint32_t)b << 12) | ((uint32_t)c << 6) | (uint32_t)d;
        out[o++] = (uint8_t)(v >> 16);
        if (!(last && pad >= 2))
            out[o++] = (uint8_t)(v >> 8);
        if (!(last && pad >= 1))
            out[o++] = (uint8_t)v;
    }
    return o;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* One inflate state for the process, reset per blob: its allocation (the 32 KiB window) is most of the cost of
 * inflating a small blob afresh. */
static z_stream zs;
static int zs_ready = 0;

/* Inflate a zlib stream whole into out_buf: its length, -1 when it is not a whole, valid stream, -2 (an exception
 * set) when memory ran out. */
static Py_ssize_t inflate_all(const uint8_t *src, size_t n) {
    if (!zs_ready) {
        memset(&zs, 0, sizeof(zs));
        if (inflateInit(&zs) != Z_OK) {
            PyErr_NoMemory();
            return -2;
        }
        zs_ready = 1;
    } else if (inflateReset(&zs) != Z_OK) {
        return -1;
    }
    if (reserve(&out_buf, &out_cap, n * 4 + 256) < 0)
        return -2;
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)n;
    size_t have = 0;
    int rc;
    for (;;) {
        zs.next_out = out_buf + have;
        zs.avail_out = (uInt)(out_cap - have);
        rc = inflate(&zs, Z_NO_FLUSH);
        have = out_cap - zs.avail_out;
        if (rc == Z_STREAM_END)
            break;
        if (rc != Z_OK && rc != Z_BUF_ERROR)
            return -1;
        if (zs.avail_out != 0) /* no progress possible: the input ended before the stream did */
            return -1;
        if (reserve(&out_buf, &out_cap, out_cap * 2) < 0)
            return -2;
    }
    return zs.avail_in == 0 ? (Py_ssize_t)have : -1;
}

/* One ZigZag LEB128 word (HdrHistogram's V2: up to 9 bytes, the 9th whole): bytes read, 0 when cut short. */
static int zigzag(const uint8_t *p, const uint8_t *end, int64_t *out) {
    uint64_t v = 0;
    int i = 0;
    for (; i < 8; i++) {
        if (p + i >= end)
            return 0;
        v |= (uint64_t)(p[i] & 0x7F) << (7 * i);
        if (!(p[i] & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return i + 1;
        }
    }
    if (p + 8 >= end)
        return 0;
    v |= (uint64_t)p[8] << 56;
    *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
    return 9;
}

typedef struct {
    Py_buffer view;
    int held;
    Py_ssize_t off, len;
} Target;

/* The V2 payload a blob holds: 0 with *p, *plen set (into the blob or the reused buffers); 2 when the blob is not a
 * form this reads; -1 with an exception set. */
static int payload_of(PyObject *blob, const uint8_t **p, Py_ssize_t *plen) {
    const uint8_t *text;
    Py_ssize_t text_len;
    int raw_bytes = PyBytes_Check(blob);
    if (raw_bytes) {
        text = (const uint8_t *)PyBytes_AS_STRING(blob);
        text_len = PyBytes_GET_SIZE(blob);
    } else if (PyUnicode_Check(blob)) {
        if (!PyUnicode_IS_ASCII(blob))
            return 2;
        text = (const uint8_t *)PyUnicode_DATA(blob);
        text_len = PyUnicode_GET_LENGTH(blob);
    } else {
        return 2;
    }
    /* The blob itself (the wire's raw form, bytes whose first byte is the cookie's), else base64 of the compressed
     * form (the V2 header: cookie, length; then the zlib stream) or of the raw one. */
    if (raw_bytes && text_len >= 1 && text[0] == RAW_FIRST) {
        *p = text;
        *plen = text_len;
        return 0;
    }
    if (reserve(&raw_buf, &raw_cap, (size_t)text_len / 4 * 3 + 4) < 0)
        return -1;
    Py_ssize_t raw_len = b64_decode(text, text_len, raw_buf);
    if (raw_len < 8)
        return 2;
    uint32_t cookie = be32(raw_buf), length = be32(raw_buf + 4);
    if ((cookie & ~0xF0u) == V2_ENCODING_COOKIE) {
        *p = raw_buf;
        *plen = raw_len;
        return 0;
    }
    if ((cookie & ~0xF0u) != V2_COMPRESSION_COOKIE || (Py_ssize_t)length + 8 > raw_len)
        return 2;
    *plen = inflate_all(raw_buf + 8, length);
    if (*plen == -2)
        return -1;
    *p = out_buf;
    return *plen < 0 ? 2 : 0;
}

typedef struct {
    unsigned long long lowest, highest;
    int digits;
    Py_ssize_t counts_len;
} LayoutKey;

typedef struct {
    Py_ssize_t npairs; /* (slot, count) pairs in slot_buf */
    int64_t total;
    Py_ssize_t lo, hi; /* the first and the last slot with a count; -1 when none */
} Counts;

/* Pass 1 over a payload of layout `k`: the slots with counts, as (slot, count) pairs in slot_buf (a word is at least
 * a byte, so at most plength of them), and that the stream is whole and inside the layout. 0 read; 2 not a payload
 * of `k` or corrupt; -1 with an exception set. */
static int read_counts(const uint8_t *p, Py_ssize_t plen, const LayoutKey *k, Counts *c) {
    c->npairs = 0;
    c->total = 0;
    c->lo = c->hi = -1;
    if (plen < PAYLOAD_HEADER)
        return 2;
    uint32_t pcookie = be32(p), plength = be32(p + 4), offset = be32(p + 8), pdigits = be32(p + 12);
    if ((pcookie & ~0xF0u) != V2_ENCODING_COOKIE || offset != 0 || pdigits != (uint32_t)k->digits ||
        be64(p + 16) != k->lowest || be64(p + 24) != k->highest || (Py_ssize_t)plength != plen - PAYLOAD_HEADER)
        return 2;
    const uint8_t *start = p + PAYLOAD_HEADER, *end = start + plength;
    if (reserve(&slot_buf, &slot_cap, 16 * (size_t)plength + 16) < 0)
        return -1;
    int64_t *pairs = (int64_t *)slot_buf;
    Py_ssize_t index = 0, counts_len = k->counts_len;
    for (const uint8_t *q = start; q < end;) {
        int64_t v;
        if (!(*q & 0x80)) { /* a one-byte word (most of them: small counts, short runs of empty slots) */
            v = (int64_t)((*q >> 1) ^ (~(uint64_t)(*q & 1) + 1));
            q++;
        } else {
            int used = zigzag(q, end, &v);
            if (!used)
                return 2;
            q += used;
        }
        if (v < 0) {
            if (v < -(int64_t)counts_len)
                return 2;
            index += (Py_ssize_t)(-v);
            continue;
        }
        if (index >= counts_len)
            return 2;
        if (v > 0) {
            if (c->lo < 0)
                c->lo = index;
            c->hi = index;
            if (c->total > INT64_MAX - v)
                return 2;
            c->total += v;
            pairs[2 * c->npairs] = index;
            pairs[2 * c->npairs + 1] = v;
            c->npairs++;
        }
        index++;
    }
    return 0;
}

/* Pass 2: add the pairs into a target whose window holds them. */
static void add_pairs(Target *t, const Counts *c) {
    int64_t *dst = (int64_t *)t->view.buf - t->off;
    const int64_t *pairs = (const int64_t *)slot_buf;
    const Py_ssize_t n = c->npairs; /* read once: the adds through dst could alias it, for all the compiler knows */
    for (Py_ssize_t j = 0; j < n; j++)
        dst[pairs[2 * j]] += pairs[2 * j + 1];
}

/* A target's (counts, off): its window's buffer held (none when counts is None). 0, or -1 with an exception set. */
static int hold(Target *t, PyObject *counts, PyObject *off_obj) {
    t->off = PyLong_AsSsize_t(off_obj);
    if (t->off == -1 && PyErr_Occurred())
        return -1;
    if (counts == Py_None)
        return 0;
    if (PyObject_GetBuffer(counts, &t->view, PyBUF_WRITABLE) < 0)
        return -1;
    t->held = 1;
    if (t->view.len % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "counts: a buffer of 8-byte integers");
        return -1;
    }
    t->len = t->view.len / 8;
    return 0;
}

static void release(Target *tg, Py_ssize_t nt) {
    for (Py_ssize_t k = 0; k < nt; k++)
        if (tg[k].held) {
            PyBuffer_Release(&tg[k].view);
            tg[k].held = 0;
        }
}

/* Whether every target holds a window over the counts' slots. */
static int windows_hold(const Target *tg, Py_ssize_t nt, const Counts *c) {
    for (Py_ssize_t k = 0; k < nt; k++)
        if (!tg[k].held || c->lo < tg[k].off || c->hi >= tg[k].off + tg[k].len)
            return 0;
    return 1;
}

static PyObject *merge_v2(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *blob, *targets_obj;
    LayoutKey key;
    if (!PyArg_ParseTuple(args, "OKKinO", &blob, &key.lowest, &key.highest, &key.digits, &key.counts_len,
                          &targets_obj))
        return NULL;
    if (!PyBytes_Check(blob) && !PyUnicode_Check(blob))
        return Py_BuildValue("(iiii)", 2, 0, 0, 0);
    PyObject *seq = PySequence_Fast(targets_obj, "targets: a sequence of (counts, off)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t nt = PySequence_Fast_GET_SIZE(seq);
    if (nt < 1 || nt > MAX_TARGETS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "1 to %d targets, got %zd", MAX_TARGETS, nt);
        return NULL;
    }
    Target tg[MAX_TARGETS];
    memset(tg, 0, sizeof(tg));
    PyObject *result = NULL;
    Counts c = {0, 0, -1, -1};
    for (Py_ssize_t k = 0; k < nt; k++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a target is a (counts, off) tuple");
            goto done;
        }
        if (hold(&tg[k], PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0)
            goto done;
    }
    const uint8_t *p;
    Py_ssize_t plen;
    int status = payload_of(blob, &p, &plen);
    if (status == 0)
        status = read_counts(p, plen, &key, &c);
    if (status < 0)
        goto done;
    if (status == 0 && c.total > 0) {
        if (!windows_hold(tg, nt, &c)) {
            status = 1;
        } else {
            for (Py_ssize_t k = 0; k < nt; k++)
                add_pairs(&tg[k], &c);
        }
    }
    result = Py_BuildValue("(iLnn)", status, (long long)(status == 2 ? 0 : c.total), c.lo, c.hi);
done:
    release(tg, nt);
    Py_DECREF(seq);
    return result;
}

static PyObject *s_lay, *s_counts, *s_off, *s_total, *s_min, *s_max;

/* hist.<name> = op(hist.<name>, value): add (op 0), or the lower (1) or the higher (2) of the two. 0, or -1. */
static int update(PyObject *hist, PyObject *name, int64_t value, int op) {
    PyObject *cur = PyObject_GetAttr(hist, name);
    if (cur == NULL)
        return -1;
    long long have = PyLong_AsLongLong(cur);
    Py_DECREF(cur);
    if (have == -1 && PyErr_Occurred())
        return -1;
    long long want = op == 0 ? have + value : op == 1 ? (value < have ? value : have) : (value > have ? value : have);
    if (want == have && op != 0)
        return 0;
    PyObject *v = PyLong_FromLongLong(want);
    if (v == NULL)
        return -1;
    int rc = PyObject_SetAttr(hist, name, v);
    Py_DECREF(v);
    return rc;
}

/* One item of merge_many: 0 merged (or nothing to add), 1 left to the caller (another layout, a window to grow, a
 * form this does not read), -1 with an exception set. */
static int merge_item(PyObject *item, PyObject *lay, const LayoutKey *key, const int64_t *lowest_at,
                      const int64_t *highest_at) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
        PyErr_SetString(PyExc_TypeError, "an item is a (blob, histograms) tuple");
        return -1;
    }
    PyObject *seq = PySequence_Fast(PyTuple_GET_ITEM(item, 1), "an item's histograms: a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t nt = PySequence_Fast_GET_SIZE(seq);
    Target tg[MAX_TARGETS];
    memset(tg, 0, sizeof(tg));
    int rc = 1;
    if (nt < 1 || nt > MAX_TARGETS)
        goto done;
    Py_ssize_t held = 0;
    for (; held < nt; held++) {
        PyObject *h = PySequence_Fast_GET_ITEM(seq, held);
        PyObject *hl = PyObject_GetAttr(h, s_lay);
        if (hl == NULL) {
            rc = -1;
            goto done;
        }
        Py_DECREF(hl);
        if (hl != lay)
            goto done;
        PyObject *counts = PyObject_GetAttr(h, s_counts), *off = PyObject_GetAttr(h, s_off);
        int ok = counts != NULL && off != NULL && hold(&tg[held], counts, off) == 0;
        Py_XDECREF(counts);
        Py_XDECREF(off);
        if (!ok) {
            rc = -1;
            goto done;
        }
    }
    const uint8_t *p;
    Py_ssize_t plen;
    Counts c;
    int status = payload_of(PyTuple_GET_ITEM(item, 0), &p, &plen);
    if (status == 0)
        status = read_counts(p, plen, key, &c);
    if (status < 0) {
        rc = -1;
        goto done;
    }
    if (status != 0)
        goto done;
    if (c.total == 0) {
        rc = 0;
        goto done;
    }
    if (!windows_hold(tg, nt, &c))
        goto done;
    for (Py_ssize_t k = 0; k < nt; k++) {
        PyObject *h = PySequence_Fast_GET_ITEM(seq, k);
        add_pairs(&tg[k], &c);
        /* LatencyHistogram._note, as merge_encoded_into does it once per histogram merged */
        if (update(h, s_total, c.total, 0) < 0 || update(h, s_min, lowest_at[c.lo], 1) < 0 ||
            update(h, s_max, highest_at[c.hi], 2) < 0) {
            rc = -1;
            goto done;
        }
    }
    rc = 0;
done:
    release(tg, nt < MAX_TARGETS ? nt : MAX_TARGETS);
    Py_DECREF(seq);
    return rc;
}

/* A buffer of `n` int64 (a layout's slot values, array('q')), held in *view; -1 with an exception set. */
static int hold_slot_values(PyObject *obj, Py_buffer *view, Py_ssize_t n) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len != 8 * n) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "slot values: %zd int64, one per slot of the layout", n);
        return -1;
    }
    return 0;
}

/* merge_item of items[start:] in turn: the index of the first it leaves (-1: all merged), or -2 with an exception
 * set. merge_many's and merge_stats' loop, the slot values held by the caller. */
static Py_ssize_t merge_items_at(PyObject *items, Py_ssize_t start, PyObject *lay, const LayoutKey *key,
                                 const int64_t *lowest_at, const int64_t *highest_at) {
    for (Py_ssize_t i = start < 0 ? 0 : start; i < PyList_GET_SIZE(items); i++) {
        int rc = merge_item(PyList_GET_ITEM(items, i), lay, key, lowest_at, highest_at);
        if (rc != 0)
            return rc < 0 ? -2 : i;
    }
    return -1;
}

/* The layout's slot values (array('q') each), held for a call: 0, or -1 with an exception set (nothing held). */
static int hold_slots(PyObject *lowest_obj, PyObject *highest_obj, const LayoutKey *key, Py_buffer *lowest_view,
                      Py_buffer *highest_view) {
    if (hold_slot_values(lowest_obj, lowest_view, key->counts_len) < 0)
        return -1;
    if (hold_slot_values(highest_obj, highest_view, key->counts_len) < 0) {
        PyBuffer_Release(lowest_view);
        return -1;
    }
    return 0;
}

static PyObject *merge_many(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *items, *lay, *lowest_obj, *highest_obj;
    Py_ssize_t start;
    LayoutKey key;
    if (!PyArg_ParseTuple(args, "O!nOKKinOO", &PyList_Type, &items, &start, &lay, &key.lowest, &key.highest,
                          &key.digits, &key.counts_len, &lowest_obj, &highest_obj))
        return NULL;
    Py_buffer lowest_view, highest_view;
    if (hold_slots(lowest_obj, highest_obj, &key, &lowest_view, &highest_view) < 0)
        return NULL;
    Py_ssize_t stop = merge_items_at(items, start, lay, &key, lowest_view.buf, highest_view.buf);
    PyBuffer_Release(&lowest_view);
    PyBuffer_Release(&highest_view);
    return stop == -2 ? NULL : PyLong_FromSsize_t(stop);
}

static PyObject *zero; /* 0, the count a class not seen yet starts from */

/* targets[metric], made by make(metric) when absent: a new reference. */
static PyObject *target_of(PyObject *targets, PyObject *metric, PyObject *make) {
    PyObject *h = PyDict_GetItemWithError(targets, metric);
    if (h != NULL) {
        Py_INCREF(h);
        return h;
    }
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(make, metric);
}

/* wire_items' list (a new reference), Py_None (a new reference) for a form the Python path must read, or NULL. */
static PyObject *build_items(PyObject *targets, PyObject *hists, PyObject *alias, PyObject *make) {
    int aliased = PyObject_IsTrue(alias);
    if (aliased < 0)
        return NULL;
    if (!PyDict_CheckExact(hists) || (aliased && !PyDict_CheckExact(alias)))
        Py_RETURN_NONE;
    PyObject *items = PyList_New(0), *shared = NULL, *metric, *blob, *a, *src;
    if (items == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    if (aliased) { /* every metric's list first, then the aliases' histograms appended: as the Python path makes them */
        shared = PyDict_New();
        if (shared == NULL)
            goto fail;
        while (PyDict_Next(hists, &pos, &metric, &blob)) {
            PyObject *h = target_of(targets, metric, make);
            if (h == NULL)
                goto fail;
            PyObject *list = PyList_New(1);
            if (list == NULL) {
                Py_DECREF(h);
                goto fail;
            }
            PyList_SET_ITEM(list, 0, h);
            int rc = PyDict_SetItem(shared, metric, list);
            Py_DECREF(list);
            if (rc < 0)
                goto fail;
        }
        pos = 0;
        while (PyDict_Next(alias, &pos, &a, &src)) {
            PyObject *list = PyDict_GetItemWithError(shared, src);
            if (list == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                continue; /* an alias of a blob this wire does not hold */
            }
            PyObject *h = target_of(targets, a, make);
            if (h == NULL)
                goto fail;
            int rc = PyList_Append(list, h);
            Py_DECREF(h);
            if (rc < 0)
                goto fail;
        }
        pos = 0;
    }
    while (PyDict_Next(hists, &pos, &metric, &blob)) {
        PyObject *to;
        if (shared != NULL) {
            to = PyDict_GetItemWithError(shared, metric);
            if (to == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetObject(PyExc_KeyError, metric);
                goto fail;
            }
            Py_INCREF(to);
        } else {
            PyObject *h = target_of(targets, metric, make);
            if (h == NULL)
                goto fail;
            to = PyTuple_Pack(1, h);
            Py_DECREF(h);
            if (to == NULL)
                goto fail;
        }
        PyObject *item = PyTuple_Pack(2, blob, to);
        Py_DECREF(to);
        if (item == NULL)
            goto fail;
        int rc = PyList_Append(items, item);
        Py_DECREF(item);
        if (rc < 0)
            goto fail;
    }
    Py_XDECREF(shared);
    return items;
fail:
    Py_XDECREF(shared);
    Py_DECREF(items);
    return NULL;
}

static PyObject *wire_items(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *targets, *hists, *alias, *make;
    if (!PyArg_ParseTuple(args, "O!OOO", &PyDict_Type, &targets, &hists, &alias, &make))
        return NULL;
    return build_items(targets, hists, alias, make);
}

/* into[k] = into.get(k, 0) + v for each (k, v) of `other`, both dicts. */
static int add_counts(PyObject *into, PyObject *other) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(other, &pos, &k, &v)) {
        PyObject *old = PyDict_GetItemWithError(into, k);
        if (old == NULL && PyErr_Occurred())
            return -1;
        PyObject *sum = PyNumber_Add(old != NULL ? old : zero, v);
        if (sum == NULL)
            return -1;
        int rc = PyDict_SetItem(into, k, sum);
        Py_DECREF(sum);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int add_field(PyObject *obj, PyObject *name, PyObject *value, long kind, PyObject *add_counts_fn) {
    if (kind == 0) {
        PyObject *n = PyNumber_Long(value);
        if (n == NULL)
            return -1;
        PyObject *cur = PyObject_GetAttr(obj, name);
        if (cur == NULL) {
            Py_DECREF(n);
            return -1;
        }
        PyObject *sum = PyNumber_Add(cur, n);
        Py_DECREF(cur);
        Py_DECREF(n);
        if (sum == NULL)
            return -1;
        int rc = PyObject_SetAttr(obj, name, sum);
        Py_DECREF(sum);
        return rc;
    }
    PyObject *into = PyObject_GetAttr(obj, name);
    if (into == NULL)
        return -1;
    int rc;
    if (PyDict_CheckExact(into) && PyDict_CheckExact(value) && into != value) {
        rc = add_counts(into, value);
    } else { /* anything else as the Python path meets it (and fails: the same error) */
        PyObject *r = PyObject_CallFunctionObjArgs(add_counts_fn, into, value, NULL);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_DECREF(into);
    return rc;
}

static int add_fields_impl(PyObject *obj, PyObject *wire, PyObject *kinds, PyObject *add_counts_fn) {
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(wire, &pos, &name, &value)) {
        PyObject *kind = PyDict_GetItemWithError(kinds, name);
        if (kind == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        long k = PyLong_AsLong(kind);
        if (k == -1 && PyErr_Occurred())
            return -1;
        Py_INCREF(name);
        Py_INCREF(value);
        int truth = PyObject_IsTrue(value);
        int rc = truth <= 0 ? truth : add_field(obj, name, value, k, add_counts_fn);
        Py_DECREF(name);
        Py_DECREF(value);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static PyObject *add_fields(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj, *wire, *kinds, *add_counts_fn;
    if (!PyArg_ParseTuple(args, "OO!O!O", &obj, &PyDict_Type, &wire, &PyDict_Type, &kinds, &add_counts_fn))
        return NULL;
    if (add_fields_impl(obj, wire, kinds, add_counts_fn) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *s_hists, *s_alias, *empty_dict; /* (wire.get("hists", {}): never written to) */
static PyObject *s_hist_fn;                      /* "_hist": a stats object's make(metric) */

/* merge_stats' work on the dict `wire` (the slot values held): a new reference to None (all done), False (nothing
 * done: a form for the Python path), or (items, index) (the item at index left to the caller); NULL with an
 * exception set. */
static PyObject *merge_stats_held(PyObject *obj, PyObject *wire, PyObject *kinds, PyObject *add_counts_fn,
                                  PyObject *make, int use_alias, PyObject *lay, const LayoutKey *key,
                                  const int64_t *lowest_at, const int64_t *highest_at) {
    PyObject *hists = PyDict_GetItemWithError(wire, s_hists), *alias = Py_None;
    if (hists == NULL && PyErr_Occurred())
        return NULL;
    if (use_alias) {
        alias = PyDict_GetItemWithError(wire, s_alias);
        if (alias == NULL) {
            if (PyErr_Occurred())
                return NULL;
            alias = Py_None;
        }
    }
    PyObject *targets = PyObject_GetAttr(obj, s_hists);
    if (targets == NULL)
        return NULL;
    if (!PyDict_CheckExact(targets)) {
        Py_DECREF(targets);
        Py_RETURN_FALSE;
    }
    PyObject *items = build_items(targets, hists == NULL ? empty_dict : hists, alias, make);
    Py_DECREF(targets);
    if (items == NULL)
        return NULL;
    if (items == Py_None) { /* nothing done: the Python path reads (and rejects) it whole */
        Py_DECREF(items);
        Py_RETURN_FALSE;
    }
    Py_ssize_t stop = merge_items_at(items, 0, lay, key, lowest_at, highest_at);
    if (stop == -2) {
        Py_DECREF(items);
        return NULL;
    }
    if (stop >= 0) /* an item to merge in Python first: the caller goes on from it, then adds the fields */
        return Py_BuildValue("(Nn)", items, stop);
    Py_DECREF(items);
    if (add_fields_impl(obj, wire, kinds, add_counts_fn) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *merge_stats(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj, *wire, *kinds, *add_counts_fn, *make, *lay, *lowest_obj, *highest_obj;
    int use_alias;
    LayoutKey key;
    if (!PyArg_ParseTuple(args, "OO!O!OOpOKKinOO", &obj, &PyDict_Type, &wire, &PyDict_Type, &kinds, &add_counts_fn,
                          &make, &use_alias, &lay, &key.lowest, &key.highest, &key.digits, &key.counts_len,
                          &lowest_obj, &highest_obj))
        return NULL;
    Py_buffer lowest_view, highest_view;
    if (hold_slots(lowest_obj, highest_obj, &key, &lowest_view, &highest_view) < 0)
        return NULL;
    PyObject *r = merge_stats_held(obj, wire, kinds, add_counts_fn, make, use_alias, lay, &key, lowest_view.buf,
                                   highest_view.buf);
    PyBuffer_Release(&lowest_view);
    PyBuffer_Release(&highest_view);
    return r;
}

/* merge_rows' step for one row: 0 merged, 1 left whole to the caller, 2 with *left = (items, index) as merge_stats
 * answers it; -1 with an exception set. */
static int merge_row(PyObject *into, PyObject *row, Py_ssize_t nkey, PyObject *new_fn, PyObject *kinds,
                     PyObject *add_counts_fn, int use_alias, PyObject *lay, const LayoutKey *key,
                     const int64_t *lowest_at, const int64_t *highest_at, PyObject **left) {
    if (!PyList_CheckExact(row))
        return 1;
    Py_ssize_t n = PyList_GET_SIZE(row);
    if (n < 1 || (nkey >= 0 && n != nkey + 1) || !PyDict_CheckExact(PyList_GET_ITEM(row, n - 1)))
        return 1;
    PyObject *part = PyList_GetSlice(row, 0, n - 1), *wire = PyList_GET_ITEM(row, n - 1);
    if (part == NULL)
        return -1;
    PyObject *k = PyList_AsTuple(part);
    Py_DECREF(part);
    if (k == NULL)
        return -1;
    if (PyObject_Hash(k) == -1) { /* a key the Python path rejects (or hashes its own way) */
        Py_DECREF(k);
        PyErr_Clear();
        return 1;
    }
    Py_INCREF(wire); /* held: the calls below run Python (new(), make) */
    int rc = -1;
    PyObject *obj = PyDict_GetItemWithError(into, k), *make = NULL, *r = NULL;
    if (obj == NULL) {
        if (PyErr_Occurred())
            goto done;
        PyObject *fresh = PyObject_CallNoArgs(new_fn);
        if (fresh == NULL)
            goto done;
        obj = PyDict_SetDefault(into, k, fresh);
        Py_DECREF(fresh);
        if (obj == NULL)
            goto done;
    }
    Py_INCREF(obj);
    make = PyObject_GetAttr(obj, s_hist_fn);
    if (make == NULL)
        goto done;
    r = merge_stats_held(obj, wire, kinds, add_counts_fn, make, use_alias, lay, key, lowest_at, highest_at);
    if (r == NULL)
        goto done;
    if (r == Py_None) {
        rc = 0;
    } else if (r == Py_False) {
        rc = 1;
    } else {
        *left = r;
        r = NULL;
        rc = 2;
    }
done:
    Py_XDECREF(r);
    Py_XDECREF(make);
    Py_XDECREF(obj);
    Py_DECREF(wire);
    Py_DECREF(k);
    return rc;
}

static PyObject *merge_rows(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *into, *rows, *new_fn, *kinds, *add_counts_fn, *lay, *lowest_obj, *highest_obj;
    Py_ssize_t start, nkey;
    int use_alias;
    LayoutKey key;
    if (!PyArg_ParseTuple(args, "O!O!nnOO!OpOKKinOO", &PyDict_Type, &into, &PyList_Type, &rows, &start, &nkey,
                          &new_fn, &PyDict_Type, &kinds, &add_counts_fn, &use_alias, &lay, &key.lowest, &key.highest,
                          &key.digits, &key.counts_len, &lowest_obj, &highest_obj))
        return NULL;
    Py_buffer lowest_view, highest_view;
    if (hold_slots(lowest_obj, highest_obj, &key, &lowest_view, &highest_view) < 0)
        return NULL;
    Py_INCREF(rows);
    PyObject *result = NULL;
    Py_ssize_t i = start < 0 ? 0 : start;
    for (; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i), *left = NULL;
        Py_INCREF(row);
        int rc = merge_row(into, row, nkey, new_fn, kinds, add_counts_fn, use_alias, lay, &key, lowest_view.buf,
                           highest_view.buf, &left);
        Py_DECREF(row);
        if (rc < 0)
            goto done;
        if (rc == 1) {
            result = Py_BuildValue("(nOO)", i, Py_None, Py_None);
            goto done;
        }
        if (rc == 2) { /* left: (items, index) */
            result = Py_BuildValue("(nOO)", i, PyTuple_GET_ITEM(left, 0), PyTuple_GET_ITEM(left, 1));
            Py_DECREF(left);
            goto done;
        }
    }
    result = Py_BuildValue("(nOO)", (Py_ssize_t)-1, Py_None, Py_None);
done:
    Py_DECREF(rows);
    PyBuffer_Release(&lowest_view);
    PyBuffer_Release(&highest_view);
    return result;
}

static PyObject *s_add, *s_bin_counts, *s_bin_lo, *s_errors;

static int add_zero(PyObject *hist, long long bucket) {
    PyObject *b = PyLong_FromLongLong(bucket);
    if (b == NULL)
        return -1;
    PyObject *r = PyObject_CallMethodObjArgs(hist, s_add, b, zero, NULL);
    Py_DECREF(b);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

#define BIN_BUCKET_LIMIT (1LL << 40)

static PyObject *merge_bin_pairs(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *hist, *flat;
    if (!PyArg_ParseTuple(args, "OO!", &hist, &PyList_Type, &flat))
        return NULL;
    Py_ssize_t npairs = PyList_GET_SIZE(flat) / 2; /* an odd last item is no pair: the Python path drops it too */
    if (npairs == 0)
        Py_RETURN_TRUE;
    long long lowest = LLONG_MAX, highest = LLONG_MIN;
    for (Py_ssize_t i = 0; i < npairs; i++) {
        PyObject *k = PyList_GET_ITEM(flat, 2 * i), *n = PyList_GET_ITEM(flat, 2 * i + 1);
        if (!PyLong_CheckExact(k) || !PyLong_CheckExact(n))
            Py_RETURN_FALSE;
        int over_k, over_n;
        long long kv = PyLong_AsLongLongAndOverflow(k, &over_k), nv = PyLong_AsLongLongAndOverflow(n, &over_n);
        if (over_k || over_n || kv < -BIN_BUCKET_LIMIT || kv > BIN_BUCKET_LIMIT || nv < 0 || nv > UINT32_MAX)
            Py_RETURN_FALSE;
        if (kv < lowest)
            lowest = kv;
        if (kv > highest)
            highest = kv;
    }
    /* Growing adds nothing (a zero): were the rest left to Python after it, the result would be the same. */
    if (add_zero(hist, lowest) < 0 || add_zero(hist, highest) < 0)
        return NULL;
    PyObject *counts = PyObject_GetAttr(hist, s_bin_counts), *lo_obj = PyObject_GetAttr(hist, s_bin_lo);
    if (counts == NULL || lo_obj == NULL) {
        Py_XDECREF(counts);
        Py_XDECREF(lo_obj);
        return NULL;
    }
    long long lo = PyLong_AsLongLong(lo_obj);
    Py_DECREF(lo_obj);
    if (lo == -1 && PyErr_Occurred()) {
        Py_DECREF(counts);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(counts, &view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        Py_DECREF(counts);
        return NULL;
    }
    int ours = view.itemsize == 4 && view.format != NULL && strcmp(view.format, "I") == 0 && lowest >= lo &&
               highest - lo < (long long)(view.len / 4);
    if (ours) {
        uint32_t *c = (uint32_t *)view.buf;
        long long slots = (long long)(view.len / 4);
        for (Py_ssize_t i = 0; i < npairs; i++) {
            long long kv = PyLong_AsLongLong(PyList_GET_ITEM(flat, 2 * i));
            long long nv = PyLong_AsLongLong(PyList_GET_ITEM(flat, 2 * i + 1));
            if (PyErr_Occurred() || kv - lo < 0 || kv - lo >= slots || nv < 0) { /* the list changed under us */
                PyBuffer_Release(&view);
                Py_DECREF(counts);
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_RuntimeError, "a bin's wire list changed while it was merged");
                return NULL;
            }
            uint64_t sum = (uint64_t)c[kv - lo] + (uint64_t)nv;
            if (sum > UINT32_MAX) {
                PyBuffer_Release(&view);
                Py_DECREF(counts);
                PyErr_SetString(PyExc_OverflowError, "unsigned int is greater than maximum");
                return NULL;
            }
            c[kv - lo] = (uint32_t)sum;
        }
    }
    PyBuffer_Release(&view);
    Py_DECREF(counts);
    return PyBool_FromLong(ours);
}

#define HASH_BITS 63

/* A bytes or bytearray object's data and length; 0 when it is neither or not whole int64 values. */
static int packed_of(PyObject *obj, const char **data, Py_ssize_t *len) {
    if (PyBytes_CheckExact(obj)) {
        *data = PyBytes_AS_STRING(obj);
        *len = PyBytes_GET_SIZE(obj);
    } else if (PyByteArray_CheckExact(obj)) {
        *data = PyByteArray_AS_STRING(obj);
        *len = PyByteArray_GET_SIZE(obj);
    } else {
        return 0;
    }
    return *len % 8 == 0;
}

static int64_t load_i64(const char *p) {
    int64_t v;
    memcpy(&v, p, 8); /* little-endian on every platform loadgen runs on (hash_sample.pack) */
    return v;
}

static PyObject *admit_rows(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *keys_obj, *columns, *seen;
    Py_ssize_t ncolumns, width;
    int level;
    if (!PyArg_ParseTuple(args, "OO!nniO!", &keys_obj, &PyList_Type, &columns, &ncolumns, &width, &level,
                          &PyList_Type, &seen))
        return NULL;
    const char *keys;
    Py_ssize_t keys_len;
    if (!packed_of(keys_obj, &keys, &keys_len) || PyList_GET_SIZE(columns) != ncolumns || width < 1 ||
        level < 0 || level > HASH_BITS || PyList_GET_SIZE(seen) != HASH_BITS + 1)
        Py_RETURN_NONE;
    Py_ssize_t n = keys_len / 8, need = n * width * 8;
    for (Py_ssize_t j = 0; j < ncolumns; j++) {
        const char *col;
        Py_ssize_t col_len;
        if (!packed_of(PyList_GET_ITEM(columns, j), &col, &col_len) || col_len < need)
            Py_RETURN_NONE;
    }
    uint64_t top = (uint64_t)1 << (HASH_BITS - level); /* 2**63 at level 0: every key (none is below 0) */
    Py_ssize_t kept = 0;
    int64_t by_level[HASH_BITS + 1] = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t h = load_i64(keys + 8 * i);
        if (h < 0)
            Py_RETURN_NONE;
        if ((uint64_t)h < top) {
            kept++;
            by_level[HASH_BITS - (h == 0 ? 0 : 64 - __builtin_clzll((unsigned long long)h))]++;
        }
    }
    PyObject *out_keys = PyBytes_FromStringAndSize(NULL, kept * 8), *out_columns = PyList_New(ncolumns);
    if (out_keys == NULL || out_columns == NULL)
        goto fail;
    char *k_out = PyBytes_AS_STRING(out_keys);
    for (Py_ssize_t i = 0, at = 0; i < n; i++) {
        if ((uint64_t)load_i64(keys + 8 * i) < top)
            memcpy(k_out + 8 * at++, keys + 8 * i, 8);
    }
    Py_ssize_t row = 8 * width;
    for (Py_ssize_t j = 0; j < ncolumns; j++) {
        const char *col = NULL;
        Py_ssize_t col_len = 0;
        packed_of(PyList_GET_ITEM(columns, j), &col, &col_len); /* (checked above) */
        PyObject *b = PyBytes_FromStringAndSize(NULL, kept * row);
        if (b == NULL)
            goto fail;
        char *c_out = PyBytes_AS_STRING(b);
        for (Py_ssize_t i = 0, at = 0; i < n; i++) {
            if ((uint64_t)load_i64(keys + 8 * i) < top)
                memcpy(c_out + row * at++, col + row * i, (size_t)row);
        }
        PyList_SET_ITEM(out_columns, j, b);
    }
    /* Last, once nothing can fail but the additions: the counts of the keys kept, by level. */
    for (int z = 0; z <= HASH_BITS; z++) {
        if (!by_level[z])
            continue;
        PyObject *add = PyLong_FromLongLong(by_level[z]);
        if (add == NULL)
            goto fail;
        PyObject *sum = PyNumber_Add(PyList_GET_ITEM(seen, z), add);
        Py_DECREF(add);
        if (sum == NULL)
            goto fail;
        PyList_SetItem(seen, z, sum); /* steals sum */
    }
    return Py_BuildValue("(nNN)", kept, out_keys, out_columns);
fail:
    Py_XDECREF(out_keys);
    Py_XDECREF(out_columns);
    return NULL;
}

/* merge_bin_row(obj, names, is_max, row) -> bool: a timeline bin's wire row (timeline.py `Bin.merge_row`) — its
 * counters `row[:len(names)]` added into obj's attributes of those names (kept as the larger where `is_max`), its
 * errors by class `row[len(names)]` added into `obj.errors` — as the Python loop does, value for value and error for
 * error, for the row a worker sends: every counter and every error count an exact int, the errors a dict. Any other
 * row (a float, a bool, a short row, no dict) is left whole to the Python loop (False, nothing changed). The row's
 * histograms, after these, stay Python's (merge_bin_pairs). */
static PyObject *merge_bin_row(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *obj, *names, *is_max, *row;
    if (!PyArg_ParseTuple(args, "OO!O!O", &obj, &PyTuple_Type, &names, &PyTuple_Type, &is_max, &row))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(is_max) != n) {
        PyErr_SetString(PyExc_ValueError, "merge_bin_row: names and is_max differ in length");
        return NULL;
    }
    if (!PyList_CheckExact(row) || PyList_GET_SIZE(row) <= n)
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyLong_CheckExact(PyList_GET_ITEM(row, i)))
            Py_RETURN_FALSE;
    PyObject *errors = PyList_GET_ITEM(row, n);
    if (!PyDict_CheckExact(errors))
        Py_RETURN_FALSE;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(errors, &pos, &k, &v))
        if (!PyLong_CheckExact(v))
            Py_RETURN_FALSE;
    PyObject *into = PyObject_GetAttr(obj, s_errors);
    if (into == NULL)
        return NULL;
    if (!PyDict_CheckExact(into) || into == errors) {
        Py_DECREF(into);
        Py_RETURN_FALSE;
    }
    /* The row (and the dict in it) is held: nothing here runs code that could change it. */
    Py_INCREF(row);
    Py_INCREF(errors);
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i), *value = PyList_GET_ITEM(row, i);
        PyObject *cur = PyObject_GetAttr(obj, name);
        if (cur == NULL) {
            rc = -1;
            break;
        }
        int biggest = PyObject_IsTrue(PyTuple_GET_ITEM(is_max, i));
        if (biggest < 0) {
            rc = -1;
        } else if (biggest) { /* `if value > cur: setattr(obj, name, int(value))` (int(value) is value) */
            int gt = PyObject_RichCompareBool(value, cur, Py_GT);
            rc = gt < 0 ? -1 : gt ? PyObject_SetAttr(obj, name, value) : 0;
        } else { /* `setattr(obj, name, cur + int(value))` */
            PyObject *sum = PyNumber_Add(cur, value);
            rc = sum == NULL ? -1 : PyObject_SetAttr(obj, name, sum);
            Py_XDECREF(sum);
        }
        Py_DECREF(cur);
    }
    if (rc == 0) /* `errors[k] = errors.get(k, 0) + int(c)` for each */
        rc = add_counts(into, errors);
    Py_DECREF(into);
    Py_DECREF(errors);
    Py_DECREF(row);
    if (rc < 0)
        return NULL;
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"merge_v2", merge_v2, METH_VARARGS,
     "merge_v2(blob, lowest, highest, digits, counts_len, targets) -> (status, total, lo, hi): add one encoded "
     "histogram into each (counts, off) target"},
    {"merge_many", merge_many, METH_VARARGS,
     "merge_many(items, start, lay, lowest, highest, digits, counts_len, lowest_at, highest_at) -> int: merge "
     "items[start:] ((blob, histograms) each) into their LatencyHistograms in turn; the index of the first it leaves "
     "to the caller, or -1"},
    {"wire_items", wire_items, METH_VARARGS,
     "wire_items(targets, hists, alias, make) -> list | None: a stats object's wire histograms as merge_many's items"},
    {"add_fields", add_fields, METH_VARARGS,
     "add_fields(obj, wire, kinds, add_counts) -> None: add a wire's counters and counts into obj's fields"},
    {"merge_bin_pairs", merge_bin_pairs, METH_VARARGS,
     "merge_bin_pairs(hist, flat) -> bool: a timeline bin's histogram merged from its (bucket, count, ...) wire list"},
    {"merge_bin_row", merge_bin_row, METH_VARARGS,
     "merge_bin_row(obj, names, is_max, row) -> bool: a timeline bin's wire counters and errors added into it"},
    {"admit_rows", admit_rows, METH_VARARGS,
     "admit_rows(keys, columns, ncolumns, width, level, seen) -> (kept, keys, columns) | None: a variant's packed "
     "rows kept at a hash sample's level"},
    {"merge_stats", merge_stats, METH_VARARGS,
     "merge_stats(obj, wire, kinds, add_counts, make, use_alias, lay, lowest, highest, digits, counts_len, lowest_at, "
     "highest_at) -> None | (items, index) | False: a group's or a slice's wire merged into it in one call"},
    {"merge_rows", merge_rows, METH_VARARGS,
     "merge_rows(into, rows, start, nkey, new, kinds, add_counts, use_alias, lay, lowest, highest, digits, "
     "counts_len, lowest_at, highest_at) -> (index, items, stop): wire rows [*key, wire] merged into into[key] in "
     "one call"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hist_merge", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hist_merge(void) {
    b64_init();
    s_lay = PyUnicode_InternFromString("_lay");
    s_counts = PyUnicode_InternFromString("_counts");
    s_off = PyUnicode_InternFromString("_off");
    s_total = PyUnicode_InternFromString("_total");
    s_min = PyUnicode_InternFromString("_min");
    s_max = PyUnicode_InternFromString("_max");
    zero = PyLong_FromLong(0);
    s_hists = PyUnicode_InternFromString("hists");
    s_alias = PyUnicode_InternFromString("alias");
    s_hist_fn = PyUnicode_InternFromString("_hist");
    empty_dict = PyDict_New();
    if (!s_hists || !s_alias || !s_hist_fn || !empty_dict)
        return NULL;
    s_add = PyUnicode_InternFromString("_add");
    s_bin_counts = PyUnicode_InternFromString("counts");
    s_bin_lo = PyUnicode_InternFromString("lo");
    s_errors = PyUnicode_InternFromString("errors");
    if (!s_add || !s_bin_counts || !s_bin_lo || !s_errors)
        return NULL;
    if (!s_lay || !s_counts || !s_off || !s_total || !s_min || !s_max || !zero)
        return NULL;
    return PyModule_Create(&module);
}
