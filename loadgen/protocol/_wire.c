/* loadgen.protocol._wire, part 2 of 2: the reader/drainer — the common case of reading a token stream, in C.
 *
 * Why: per chunk, the Python path runs the framing regex, orjson, the dialect's parse and the accumulator, and the
 * reactor loop around recvmsg() costs more again; at high chunk rates that is most of a worker's core
 * (`python -m bench.hotpath` prints both paths' cost per chunk). Most reads of a streaming response are the same
 * thing: whole HTTP chunks, each one SSE event of one `data:` line holding an OpenAI chunk object with a token
 * (and, from vLLM / SGLang, the cumulative usage). This module handles exactly that and nothing else:
 *
 * - `Drainer.drain(epfd, counters)` polls the epoll set (no wait), does one recvmsg() per ready socket with the
 *   kernel's receive stamp (SO_TIMESTAMPNS, moved onto CLOCK_MONOTONIC), counts late reads, and gives each read
 *   to the socket's armed `TokenChunkCounter`, if it has one. What the counter does not count (the whole read, or
 *   its rest from a chunk boundary) comes back to Python as (fd, time, bytes | errno), untouched, for the full
 *   parser. `Drainer.wake(epfd, counters, on_reads)` is the same as the event loop's callback: Python runs only
 *   for a wake-up that left it reads.
 * - `TokenChunkCounter` is one request's fast half: while armed, it counts the leading whole token chunks of a read
 *   straight into the request's record (OpenAI chat or completions chunks, or the Responses API's answer deltas,
 *   whose event may also have its `event: response.output_text.delta` line; the Messages API's `text_delta` events
 *   with their `event: content_block_delta` line) and hands the rest of the read, from the first chunk it does not
 *   take, back to Python with the same arrival time. Armed by Python only when the chunked decoder is at a chunk
 *   boundary and the SSE parser holds nothing (after the response head, and after any read Python parsed), which is
 *   exactly where Python stands after the chunks counted here: the rest parses as a read of its own. A chunk is
 *   taken only if *every* event in it is a lone `data:` line whose JSON is valid and of a shape the strict reader
 *   in _wire_json.c knows: a token chunk, and for chat / completions the common end of a stream too (a plain string
 *   finish_reason, copied to the record; the usage-only chunk; `[DONE]`, taken only with more of the read after
 *   it, so that Python, which must see the end, parses that read: the accumulator ends the stream when it takes
 *   the count back, `disarm`). Everything else (errors, llama.cpp timings, cached or reasoning token details,
 *   escapes in keys or in a finish reason, surrogates, bools as counts, other framings) goes to Python whole, from
 *   its chunk on, so the Python path stays the one source of truth for every odd case.
 * - `arm_timer(fd, at)` re-arms the open-loop dispatcher's timerfd (client/precise_timer.py) at an absolute
 *   monotonic time: one syscall per arrival where ctypes cost ~3 µs (not the read path, but its only other C home).
 * - `parse_head(data)` reads the common response head (a chunked `HTTP/1.1 200`, whole at the start of `data`) for
 *   `_Parser` (loadgen/client/connection.py): only a head every byte of which llhttp reads the same, else None and
 *   llhttp reads it (tests/unit/test_head_parity.py holds the parser's state and the record equal either way).
 * The accounting a counted chunk does is the accumulator's (accumulator.py `_on_chunk`): with server counts, the
 * chunk's tokens are the cumulative count's advance (no token if it did not move); without, one token per chunk
 * with output; the first token decides which. `usage.prompt_tokens` / `completion_tokens` integers are copied to
 * the record.
 * tests/unit/test_wire.py checks every accepted payload against the Python path; test_wire_splits.py captured
 * streams cut at every byte.
 *
 * Nothing is held across reads here (a read is at most RECV_SIZE; what is not counted is handed back), so an event
 * that never ends always reaches the Python SSE parser, whose 1 MiB bound (sse.py `MAX_EVENT`) fails the stream as
 * malformed on both paths alike (tests/integration/test_event_bound_paths.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>

#include "_wire_json.h"

#define RECV_SIZE 65536
#define MAX_EVENTS 4096
#define MAX_CHUNKS 256
#define LATE_READ_NS 1000000LL
#define STAMP_SLACK_NS 5000000000LL
#define OFFSET_TRIES 4
#define OFFSET_TIGHT_NS 20000LL

/* ------------------------------------------------------------------------------------------------------------ */
/* TokenChunkCounter: one request's fast half */

typedef struct {
    PyObject_HEAD
    int armed;
    int live;           /* armed by Python since it last took the count back (the count here is the latest) */
    int exact;          /* -1 undecided, 0 one token per chunk, 1 counts from the server */
    int chat;
    long long counted;
    double last_rx;
    PyObject *record;
    PyObject *times_append;
    PyObject *tokens_append;
    PyObject *server_source; /* the record's token_source once counts are known to come from the server */
    long long set_pt, set_ct; /* what was last written to the record (-2: nothing yet) */
    int ended;                /* `[DONE]` was counted here (at ended_at) since the last arm */
    double ended_at;
} TokenChunkCounter;

static PyObject *s_prompt_tokens, *s_output_tokens, *s_token_source, *s_finish_reason;

static int Counter_init(TokenChunkCounter *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"record", "chat", "server_source", NULL};
    PyObject *record, *server_source;
    int chat; /* the kind: LG_COMPLETIONS, LG_CHAT (True), LG_RESPONSES or LG_ANTHROPIC */
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OiO", names, &record, &chat, &server_source)) return -1;
    if (chat < LG_COMPLETIONS || chat > LG_ANTHROPIC) {
        PyErr_Format(PyExc_ValueError, "unknown token chunk kind %d", chat);
        return -1;
    }
    Py_INCREF(server_source);
    Py_XSETREF(self->server_source, server_source);
    PyObject *times = PyObject_GetAttrString(record, "chunk_times");
    if (!times) return -1;
    PyObject *tokens = PyObject_GetAttrString(record, "chunk_tokens");
    if (!tokens) {
        Py_DECREF(times);
        return -1;
    }
    Py_XSETREF(self->times_append, PyObject_GetAttrString(times, "append"));
    Py_XSETREF(self->tokens_append, PyObject_GetAttrString(tokens, "append"));
    Py_DECREF(times);
    Py_DECREF(tokens);
    if (!self->times_append || !self->tokens_append) return -1;
    Py_INCREF(record);
    Py_XSETREF(self->record, record);
    self->chat = chat;
    self->armed = self->live = 0;
    self->exact = -1;
    self->counted = 0;
    self->last_rx = 0.0;
    self->set_pt = self->set_ct = -2;
    self->ended = 0;
    self->ended_at = 0.0;
    return 0;
}

static int Counter_traverse(TokenChunkCounter *self, visitproc visit, void *arg) {
    Py_VISIT(self->record);
    Py_VISIT(self->times_append);
    Py_VISIT(self->tokens_append);
    Py_VISIT(self->server_source);
    return 0;
}

static int Counter_clear(TokenChunkCounter *self) {
    Py_CLEAR(self->record);
    Py_CLEAR(self->times_append);
    Py_CLEAR(self->tokens_append);
    Py_CLEAR(self->server_source);
    return 0;
}

static void Counter_dealloc(TokenChunkCounter *self) {
    PyObject_GC_UnTrack(self);
    Counter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int set_count(PyObject *record, PyObject *name, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (!o) return -1;
    int r = PyObject_SetAttr(record, name, o);
    Py_DECREF(o);
    return r;
}

static Py_ssize_t counter_scan(TokenChunkCounter *self, double t, const unsigned char *data, Py_ssize_t n);

/* The bytes counted from the start of the read (0 to n, always whole chunks); -1: a Python error (set). A read
 * not counted to its end disarms the counter: Python must parse the rest before any later read of the stream may
 * be counted here (order). So does the stream's end marker. */
static Py_ssize_t counter_try_count(TokenChunkCounter *self, double t, const unsigned char *data, Py_ssize_t n) {
    if (!self->armed) return 0;
    Py_ssize_t r = counter_scan(self, t, data, n);
    if (r >= 0 && r < n) self->armed = 0;
    return r;
}

/* One chunk's events at data[i:stop] (the chunk's data, without its CRLF): each `data: <payload>\n\n`, a Responses
 * or Messages API event with its `event:` line first, every payload a token chunk (or, for chat / completions, the
 * usage-only chunk or `[DONE]`, which must be the chunk's last event). Fills chunks[*count...]; 0, or -1 when the
 * chunk is not all of that (then *count is as it was). */
static int scan_events(TokenChunkCounter *self, const unsigned char *data, Py_ssize_t i, Py_ssize_t stop,
                       LgChunk *chunks, int *count) {
    int c = *count;
    if (i >= stop) return -1; /* an empty chunk would be the last one */
    while (i < stop) {
        if (c == MAX_CHUNKS) return -1;
        if (self->chat == LG_RESPONSES) {
            static const char ev[] = "event: response.output_text.delta\n";
            if (stop - i >= (Py_ssize_t)sizeof ev - 1 && memcmp(data + i, ev, sizeof ev - 1) == 0) i += sizeof ev - 1;
        } else if (self->chat == LG_ANTHROPIC) {
            static const char ev[] = "event: content_block_delta\n";
            if (stop - i >= (Py_ssize_t)sizeof ev - 1 && memcmp(data + i, ev, sizeof ev - 1) == 0) i += sizeof ev - 1;
        }
        if (stop - i < 8 || memcmp(data + i, "data: ", 6) != 0) return -1;
        const unsigned char *payload = data + i + 6;
        const unsigned char *nl = memchr(payload, '\n', (size_t)(stop - (i + 6)));
        if (!nl) return -1;
        Py_ssize_t plen = nl - payload;
        Py_ssize_t after = nl - data;
        if (stop - after < 2 || nl[1] != '\n' || memchr(payload, '\r', (size_t)plen)) return -1;
        LgChunk *ch = &chunks[c];
        if (lg_parse_token_chunk(payload, plen, self->chat, ch) < 0) return -1;
        c++;
        i = after + 2;
        if (ch->done && i != stop) return -1; /* events after the end marker: Python's (it ignores them) */
    }
    *count = c;
    return 0;
}

static Py_ssize_t counter_scan(TokenChunkCounter *self, double t, const unsigned char *data, Py_ssize_t n) {
    if (n <= 0) return 0;
    LgChunk chunks[MAX_CHUNKS];
    int count = 0;
    Py_ssize_t pos = 0;
    /* Pass 1: the leading run of chunks `<hex>\r\n<events>\r\n` whose events are all ours (scan_events), size =
     * the events' length. The first chunk that is not, and everything after it, is Python's. A chunk ending in
     * `[DONE]` ends the run, and is taken only when more of the read follows it, so that Python, which must see
     * the end of the stream, is called with this read. */
    while (pos < n) {
        Py_ssize_t i = pos;
        unsigned long long size = 0;
        while (i < n && i - pos < 16 && lg_hexval(data[i]) >= 0) size = size * 16 + lg_hexval(data[i++]);
        if (i == pos || n - i < 2 || data[i] != '\r' || data[i + 1] != '\n') break;
        i += 2;
        if (size > (unsigned long long)(n - i) || n - i - (Py_ssize_t)size < 2) break;
        Py_ssize_t stop = i + (Py_ssize_t)size;
        if (data[stop] != '\r' || data[stop + 1] != '\n') break;
        int before = count;
        if (scan_events(self, data, i, stop, chunks, &count) < 0) break;
        if (chunks[count - 1].done) {
            if (stop + 2 == n) count = before;
            else pos = stop + 2;
            break;
        }
        pos = stop + 2;
    }
    if (count == 0) return 0;
    /* Pass 2: the accumulator's accounting (accumulator.py `_on_chunk`). Counts are the server's when it sends a
     * cumulative one from the first token on; text before the count moved means they cannot be trusted. */
    for (int j = 0; j < count; j++) {
        LgChunk *ch = &chunks[j];
        if (ch->done) {
            /* The end marker (the dialect's `Chunk(done=True)`): the accumulator ends the stream at `disarm`. */
            self->ended = 1;
            self->ended_at = t;
            self->armed = 0;
            break;
        }
        long long k = 0;
        int from_server = 0;
        if (ch->usage_only) {
            k = 0; /* totals, not tokens carried by this chunk */
        } else {
            if (self->exact != 0 && ch->usage_dict && ch->ct >= 0) {
                k = ch->ct - self->counted;
                from_server = 1;
                if (k <= 0 && ch->has_output && self->exact < 0) from_server = 0;
            }
            if (!from_server) k = ch->has_output ? 1 : 0;
        }
        if (k > 0) {
            if (self->exact < 0) {
                self->exact = from_server;
                if (from_server && PyObject_SetAttr(self->record, s_token_source, self->server_source) < 0) return -1;
            }
            self->counted += k;
            PyObject *tf = PyFloat_FromDouble(t);
            if (!tf) return -1;
            PyObject *r = PyObject_CallOneArg(self->times_append, tf);
            Py_DECREF(tf);
            if (!r) return -1;
            Py_DECREF(r);
            PyObject *kl = PyLong_FromLongLong(k);
            if (!kl) return -1;
            r = PyObject_CallOneArg(self->tokens_append, kl);
            Py_DECREF(kl);
            if (!r) return -1;
            Py_DECREF(r);
        }
        if (ch->usage_dict) {
            if (ch->pt >= 0 && ch->pt != self->set_pt) {
                if (set_count(self->record, s_prompt_tokens, ch->pt) < 0) return -1;
                self->set_pt = ch->pt;
            }
            if (ch->ct >= 0 && ch->ct != self->set_ct) {
                if (set_count(self->record, s_output_tokens, ch->ct) < 0) return -1;
                self->set_ct = ch->ct;
            }
        }
        if (ch->fin_len >= 0) {
            PyObject *fin = PyUnicode_DecodeUTF8((const char *)ch->fin, ch->fin_len, NULL);
            if (!fin) return -1;
            int r = PyObject_SetAttr(self->record, s_finish_reason, fin);
            Py_DECREF(fin);
            if (r < 0) return -1;
        }
    }
    self->last_rx = t;
    return pos;
}

static PyObject *Counter_try_count(TokenChunkCounter *self, PyObject *args) {
    double t;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "dy*", &t, &buf)) return NULL;
    Py_ssize_t r = counter_try_count(self, t, (const unsigned char *)buf.buf, buf.len);
    PyBuffer_Release(&buf);
    if (r < 0) return NULL;
    return PyLong_FromSsize_t(r);
}

static PyObject *Counter_arm(TokenChunkCounter *self, PyObject *args) {
    /* arm(counted, exact): the accumulator's state, handed over; the next reads may be counted here. */
    long long counted;
    int exact;
    if (!PyArg_ParseTuple(args, "Li", &counted, &exact)) return NULL;
    self->counted = counted;
    self->exact = exact < 0 ? -1 : exact != 0;
    self->armed = 1;
    self->live = 1;
    self->ended = 0;
    /* The record may have been written by Python meanwhile: write the next usage values again. */
    self->set_pt = self->set_ct = -2;
    Py_RETURN_NONE;
}

static PyObject *Counter_disarm(TokenChunkCounter *self, PyObject *unused) {
    /* Python takes over: (count, exact) reached here if the counter was armed since the last disarm, else None. */
    self->armed = 0;
    if (!self->live) Py_RETURN_NONE;
    self->live = 0;
    if (self->ended) {
        self->ended = 0;
        return Py_BuildValue("(Lid)", self->counted, self->exact, self->ended_at);
    }
    return Py_BuildValue("(LiO)", self->counted, self->exact, Py_None);
}

static PyMethodDef Counter_methods[] = {
    {"disarm", (PyCFunction)Counter_disarm, METH_NOARGS,
     "disarm() -> (counted, exact, ended_at | None) | None: stop counting reads; the state if armed since the last "
     "disarm (ended_at: when `[DONE]` was counted here)."},
    {"try_count", (PyCFunction)Counter_try_count, METH_VARARGS,
     "try_count(t, data) -> int: count the leading whole token chunks of a read arrived at t into the record, if "
     "the counter is armed; the bytes counted (a chunk boundary). Fewer than len(data) disarms: the rest is Python's."},
    {"arm", (PyCFunction)Counter_arm, METH_VARARGS, "arm(counted, exact): hand over the accumulator's state."},
    {NULL}};

static PyMemberDef Counter_members[] = {
    {"armed", T_INT, offsetof(TokenChunkCounter, armed), READONLY, "whether the next read may be counted here"},
    {"counted", T_LONGLONG, offsetof(TokenChunkCounter, counted), READONLY, "tokens counted so far"},
    {"exact", T_INT, offsetof(TokenChunkCounter, exact), READONLY, "-1 undecided, 0 one per chunk, 1 server counts"},
    {"last_rx", T_DOUBLE, offsetof(TokenChunkCounter, last_rx), READONLY, "arrival time of the last read counted here"},
    {NULL}};

static PyTypeObject TokenChunkCounterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loadgen.protocol._wire.TokenChunkCounter",
    .tp_basicsize = sizeof(TokenChunkCounter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Counts one request's whole token chunks into its record while armed: the fast half of its stream "
              "accumulator (see the module docstring).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Counter_init,
    .tp_dealloc = (destructor)Counter_dealloc,
    .tp_traverse = (traverseproc)Counter_traverse,
    .tp_clear = (inquiry)Counter_clear,
    .tp_methods = Counter_methods,
    .tp_members = Counter_members,
};

/* ------------------------------------------------------------------------------------------------------------ */
/* Drainer */

typedef struct {
    PyObject_HEAD
    long long reads, late, reads_counted, reads_split;
    double worst;
    unsigned char *buf;
    struct epoll_event *events;
} Drainer;

static int Drainer_init(Drainer *self, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, "")) return -1;
    if (!self->buf) self->buf = PyMem_Malloc(RECV_SIZE);
    if (!self->events) self->events = PyMem_Malloc(sizeof(struct epoll_event) * MAX_EVENTS);
    if (!self->buf || !self->events) {
        PyErr_NoMemory();
        return -1;
    }
    self->reads = self->late = self->reads_counted = self->reads_split = 0;
    self->worst = 0.0;
    return 0;
}

static void Drainer_dealloc(Drainer *self) {
    PyMem_Free(self->buf);
    PyMem_Free(self->events);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline long long ns_of(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* realtime − monotonic, in ns, with *mono_ns the last monotonic reading: the realtime reading bracketed by two
 * monotonic ones and set against their midpoint, the narrowest of a few tries kept, so a preemption between two clock
 * reads cannot move every stamp of a wake-up by its length (loadgen/client/clock.py says why; it is this in Python). */
static long long realtime_offset(long long *mono_ns) {
    long long best = 0, best_gap = 0, after = 0;
    for (int i = 0; i < OFFSET_TRIES; i++) {
        long long before = ns_of(CLOCK_MONOTONIC);
        long long real = ns_of(CLOCK_REALTIME);
        after = ns_of(CLOCK_MONOTONIC);
        long long gap = after - before;
        if (i == 0 || gap < best_gap) {
            best_gap = gap;
            best = real - before - gap / 2;
        }
        if (gap <= OFFSET_TIGHT_NS) break;
    }
    *mono_ns = after;
    return best;
}

static int append_slow(PyObject *out, int fd, double t, PyObject *what) {
    if (!what) return -1;
    PyObject *tup = Py_BuildValue("(idN)", fd, t, what);
    if (!tup) return -1;
    int r = PyList_Append(out, tup);
    Py_DECREF(tup);
    return r;
}

static PyObject *drain(Drainer *self, int epfd, PyObject *counters) {
    /* No wait (the event loop said the set is ready), so the GIL is kept. */
    int nev = epoll_wait(epfd, self->events, MAX_EVENTS, 0);
    if (nev < 0) {
        if (errno == EINTR) return PyList_New(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *out = PyList_New(0);
    if (!out || nev == 0) return out;
    long long woke_ns;
    long long offset = realtime_offset(&woke_ns); /* realtime − monotonic */
    double woke = woke_ns * 1e-9;
    char cbuf[CMSG_SPACE(sizeof(struct timespec))];
    for (int i = 0; i < nev; i++) {
        int fd = self->events[i].data.fd;
        struct iovec iov = {self->buf, RECV_SIZE};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf;
        msg.msg_controllen = sizeof cbuf;
        ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
            if (append_slow(out, fd, woke, PyLong_FromLong(errno)) < 0) goto fail;
            continue;
        }
        double t = woke;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS &&
                cm->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                long long k = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec - offset;
                if (k > woke_ns - STAMP_SLACK_NS && k < woke_ns + STAMP_SLACK_NS) {
                    t = k * 1e-9;
                    self->reads++;
                    long long delay = ns_of(CLOCK_MONOTONIC) - k;
                    if (delay > LATE_READ_NS) {
                        self->late++;
                        if (delay * 1e-9 > self->worst) self->worst = delay * 1e-9;
                    }
                }
                break;
            }
        }
        Py_ssize_t used = 0;
        if (n > 0) {
            PyObject *key = PyLong_FromLong(fd);
            if (!key) goto fail;
            PyObject *counter = PyDict_GetItemWithError(counters, key);
            Py_DECREF(key);
            if (!counter && PyErr_Occurred()) goto fail;
            if (counter && Py_IS_TYPE(counter, &TokenChunkCounterType)) {
                Py_INCREF(counter);
                used = counter_try_count((TokenChunkCounter *)counter, t, self->buf, n);
                Py_DECREF(counter);
                if (used < 0) goto fail;
                if (used == n) {
                    self->reads_counted++;
                    continue;
                }
                if (used > 0) self->reads_split++;
            }
        }
        /* What the counter did not count (all of it, or the rest after its leading whole chunks: a chunk boundary,
         * where the Python parser stands after a counted read), with the same arrival time. */
        if (append_slow(out, fd, t, PyBytes_FromStringAndSize((const char *)self->buf + used, n - used)) < 0)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *Drainer_drain(Drainer *self, PyObject *args) {
    int epfd;
    PyObject *counters;
    if (!PyArg_ParseTuple(args, "iO!", &epfd, &PyDict_Type, &counters)) return NULL;
    return drain(self, epfd, counters);
}

/* The reactor's wake-up itself, as the event loop's callback: `drain`, and only when a read is left for Python,
 * `on_reads(reads)`. A wake-up whose reads the chunk counters took whole (most of a stream's) runs no Python. */
static PyObject *Drainer_wake(Drainer *self, PyObject *args) {
    int epfd;
    PyObject *counters, *on_reads;
    if (!PyArg_ParseTuple(args, "iO!O", &epfd, &PyDict_Type, &counters, &on_reads)) return NULL;
    PyObject *out = drain(self, epfd, counters);
    if (!out) return NULL;
    if (PyList_GET_SIZE(out) == 0) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    PyObject *r = PyObject_CallOneArg(on_reads, out);
    Py_DECREF(out);
    return r;
}

static PyObject *Drainer_pop_stats(Drainer *self, PyObject *unused) {
    PyObject *r = Py_BuildValue("(LLd)", self->reads, self->late, self->worst);
    self->reads = self->late = 0;
    self->worst = 0.0;
    return r;
}

static PyMethodDef Drainer_methods[] = {
    {"drain", (PyCFunction)Drainer_drain, METH_VARARGS,
     "drain(epfd, counters) -> [(fd, t, bytes | errno)]: read every ready socket once; reads an armed "
     "TokenChunkCounter (counters: fd -> counter) counted whole are not returned."},
    {"wake", (PyCFunction)Drainer_wake, METH_VARARGS,
     "wake(epfd, counters, on_reads) -> None | on_reads(...): drain(epfd, counters), then on_reads(reads) only "
     "when there are reads left for Python (the event loop's callback for the epoll set)."},
    {"pop_stats", (PyCFunction)Drainer_pop_stats, METH_NOARGS,
     "(stamped reads, reads > 1 ms late, worst delay s) since the last call."},
    {NULL}};

static PyMemberDef Drainer_members[] = {
    {"reads_counted", T_LONGLONG, offsetof(Drainer, reads_counted), READONLY,
     "reads counted whole by a TokenChunkCounter, since the start"},
    {"reads_split", T_LONGLONG, offsetof(Drainer, reads_split), READONLY,
     "reads whose leading whole chunks a TokenChunkCounter counted, the rest handed to Python, since the start"},
    {NULL}};

static PyTypeObject DrainerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loadgen.protocol._wire.Drainer",
    .tp_basicsize = sizeof(Drainer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reads the ready sockets of an epoll set with kernel receive stamps (see the module docstring).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Drainer_init,
    .tp_dealloc = (destructor)Drainer_dealloc,
    .tp_methods = Drainer_methods,
    .tp_members = Drainer_members,
};

/* ------------------------------------------------------------------------------------------------------------ */
/* parse_head: the common response head, read whole in one call */

/* RFC 9110 tchar */
static int is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int name_is(const unsigned char *p, Py_ssize_t n, const char *lower) {
    Py_ssize_t k = (Py_ssize_t)strlen(lower);
    if (n != k) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c >= 'A' && c <= 'Z') c += 32;
        if (c != (unsigned char)lower[i]) return 0;
    }
    return 1;
}

/* two tchar names of length n, equal but for case */
static int name_is_ci(const unsigned char *a, const unsigned char *b, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z') x += 32;
        if (y >= 'A' && y <= 'Z') y += 32;
        if (x != y) return 0;
    }
    return 1;
}

/* parse_head(data) -> None | (head_len, reason | None, keep_alive, [(lower, (name, value)), ...], unique): a response head that
 * starts `data` and is, byte for byte, one llhttp reads the same: `HTTP/1.1 200`, a reason of SP / VCHAR / obs-text,
 * header lines `token ":" OWS value CRLF` (the value as llhttp gives it: leading OWS dropped, trailing kept; bytes
 * latin-1), `Transfer-Encoding: chunked` once, no Content-Length, Upgrade or Proxy-Connection, every Connection
 * exactly `close` or `keep-alive`. Anything else (an incomplete head too): None, and llhttp reads it. */
static PyObject *wire_parse_head(PyObject *module, PyObject *arg) {
    if (!PyBytes_Check(arg)) Py_RETURN_NONE;
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg), i;
    if (n < 16 || memcmp(d, "HTTP/1.1 200", 12) != 0) Py_RETURN_NONE;
    Py_ssize_t rs = 12, re;
    int has_reason = d[12] == ' ';
    if (has_reason) {
        rs = 13;
        if (rs < n && d[rs] == ' ') Py_RETURN_NONE;
        for (re = rs; re < n && d[re] != '\r'; re++)
            if (d[re] < 0x20 || d[re] == 0x7f) Py_RETURN_NONE;
    } else {
        re = 12;
    }
    if (re + 1 >= n || d[re] != '\r' || d[re + 1] != '\n') Py_RETURN_NONE;
    /* a first pass checks every line and finds the end; nothing is built for a head that falls back */
    int chunked = 0, close = 0, lines = 0;
    for (i = re + 2;;) {
        if (i + 1 >= n) Py_RETURN_NONE;
        if (d[i] == '\r') {
            if (d[i + 1] != '\n') Py_RETURN_NONE;
            i += 2;
            break;
        }
        Py_ssize_t ns = i;
        while (i < n && is_tchar(d[i])) i++;
        if (i == ns || i >= n || d[i] != ':') Py_RETURN_NONE;
        Py_ssize_t ne = i++;
        while (i < n && (d[i] == ' ' || d[i] == '\t')) i++;
        Py_ssize_t vs = i;
        while (i < n && d[i] != '\r') {
            if ((d[i] < 0x20 && d[i] != '\t') || d[i] == 0x7f) Py_RETURN_NONE;
            i++;
        }
        if (i + 1 >= n || d[i + 1] != '\n') Py_RETURN_NONE;
        Py_ssize_t ve = i;
        i += 2;
        lines++;
        const unsigned char *nm = d + ns;
        Py_ssize_t nl = ne - ns;
        if (nl == 17 && name_is(nm, nl, "transfer-encoding")) {
            if (chunked || !name_is(d + vs, ve - vs, "chunked")) Py_RETURN_NONE;
            chunked = 1;
        } else if (nl == 10 && name_is(nm, nl, "connection")) {
            if (name_is(d + vs, ve - vs, "close"))
                close = 1;
            else if (!name_is(d + vs, ve - vs, "keep-alive"))
                Py_RETURN_NONE;
        } else if (name_is(nm, nl, "content-length") || name_is(nm, nl, "upgrade") ||
                   name_is(nm, nl, "proxy-connection")) {
            Py_RETURN_NONE;
        }
    }
    if (!chunked) Py_RETURN_NONE;
    Py_ssize_t head_len = i;
    PyObject *reason = NULL, *fields = NULL, *out = NULL;
    if (has_reason) {
        reason = PyUnicode_DecodeLatin1((const char *)d + rs, re - rs, NULL);
    } else {
        reason = Py_None;
        Py_INCREF(reason);
    }
    if (!reason || !(fields = PyList_New(lines))) goto fail;
    /* each line as (lowercased name, (name, value)): geventhttpclient's Headers storage, filled in one
     * dict.update when no name repeats (`unique`), else line by line through Headers.add */
    int unique = lines <= 64;
    Py_ssize_t starts[64], lens[64];
    int k = 0;
    for (i = re + 2; k < lines; k++) {
        Py_ssize_t ns = i;
        int upper = 0;
        while (d[i] != ':') upper |= d[i] >= 'A' && d[i] <= 'Z', i++;
        Py_ssize_t ne = i++;
        while (d[i] == ' ' || d[i] == '\t') i++;
        Py_ssize_t vs = i;
        while (d[i] != '\r') i++;
        if (unique) {
            for (int j = 0; j < k && unique; j++)
                if (lens[j] == ne - ns && name_is_ci(d + starts[j], d + ns, ne - ns)) unique = 0;
            starts[k] = ns;
            lens[k] = ne - ns;
        }
        PyObject *name = PyUnicode_DecodeLatin1((const char *)d + ns, ne - ns, NULL);
        PyObject *lower = NULL, *value = NULL, *pair = NULL, *item = NULL;
        if (name && upper) {
            lower = PyUnicode_New(ne - ns, 127);
            if (lower) {
                Py_UCS1 *out = PyUnicode_1BYTE_DATA(lower);
                for (Py_ssize_t j = 0; j < ne - ns; j++) {
                    unsigned char c = d[ns + j];
                    out[j] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
                }
            }
        } else if (name) {
            lower = name;
            Py_INCREF(lower);
        }
        if (lower) value = PyUnicode_DecodeLatin1((const char *)d + vs, i - vs, NULL);
        if (value) pair = PyTuple_Pack(2, name, value);
        if (pair) item = PyTuple_Pack(2, lower, pair);
        Py_XDECREF(name);
        Py_XDECREF(lower);
        Py_XDECREF(value);
        Py_XDECREF(pair);
        if (!item) goto fail;
        PyList_SET_ITEM(fields, k, item);
        i += 2;
    }
    out = Py_BuildValue("(nOOOO)", head_len, reason, close ? Py_False : Py_True, fields,
                        unique ? Py_True : Py_False);
    Py_CLEAR(fields);
fail:
    Py_XDECREF(reason);
    Py_XDECREF(fields);
    return out;
}

/* `arm_timer(fd, at)`: the timerfd `fd` set to expire once at `at` s of CLOCK_MONOTONIC (absolute), the seconds and
 * nanoseconds split as client/precise_timer.py's ctypes path splits them (never 0 ns: that would disarm it). The
 * open-loop dispatcher re-arms it for every arrival; through ctypes that costs ~3 µs, here one syscall. False where
 * the kernel refuses (the caller's guard then waits instead). */
static PyObject *wire_arm_timer(PyObject *module, PyObject *args) {
    int fd;
    double at;
    if (!PyArg_ParseTuple(args, "id", &fd, &at)) return NULL;
    if (!(at >= 0.0) || at >= 9.2e18) Py_RETURN_FALSE; /* NaN, negative, or past what tv_sec holds */
    long long sec = (long long)at;
    long long nsec = (long long)((at - (double)sec) * 1e9);
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t)sec;
    its.it_value.tv_nsec = nsec < 1 ? 1 : (long)nsec;
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL) != 0) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

static PyMethodDef wire_functions[] = {
    {"arm_timer", (PyCFunction)wire_arm_timer, METH_VARARGS,
     "arm_timer(fd, at) -> bool: the timerfd set to expire once at `at` (monotonic seconds, absolute)."},
    {"parse_head", (PyCFunction)wire_parse_head, METH_O,
     "parse_head(data) -> None | (head_len, reason | None, keep_alive, [(lower, (name, value)), ...], unique): a "
     "chunked "
     "`HTTP/1.1 200` head llhttp reads the same, else None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef wiremodule = {
    PyModuleDef_HEAD_INIT, "loadgen.protocol._wire", "The common case of reading a token stream, in C.", -1, wire_functions};

PyMODINIT_FUNC PyInit__wire(void) {
    if (PyType_Ready(&TokenChunkCounterType) < 0 || PyType_Ready(&DrainerType) < 0) return NULL;
    s_prompt_tokens = PyUnicode_InternFromString("prompt_tokens");
    s_output_tokens = PyUnicode_InternFromString("output_tokens");
    s_token_source = PyUnicode_InternFromString("token_source");
    s_finish_reason = PyUnicode_InternFromString("finish_reason");
    if (!s_prompt_tokens || !s_output_tokens || !s_token_source || !s_finish_reason) return NULL;
    PyObject *m = PyModule_Create(&wiremodule);
    if (!m) return NULL;
    Py_INCREF(&TokenChunkCounterType);
    Py_INCREF(&DrainerType);
    if (PyModule_AddObject(m, "TokenChunkCounter", (PyObject *)&TokenChunkCounterType) < 0 ||
        PyModule_AddObject(m, "Drainer", (PyObject *)&DrainerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "SO_TIMESTAMPNS", SO_TIMESTAMPNS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
