/* loadgen.protocol._wire: the common case of reading a token stream, in C.
 *
 * Why: at 100k streamed chunks/s one worker process spent ~40 % of its core in Python per chunk (framing regex,
 * orjson, the dialect's parse, the accumulator) and ~7 % more in the reactor loop around recvmsg(). Most reads of
 * a streaming response are the same thing: whole HTTP chunks, each one SSE event of one `data:` line holding an
 * OpenAI chunk object with a token (and, from vLLM / SGLang, the cumulative usage). This module handles exactly
 * that and nothing else:
 *
 * - `Drainer.drain(epfd, tapes)` polls the epoll set (no wait), does one recvmsg() per ready socket with the
 *   kernel's receive stamp (SO_TIMESTAMPNS, moved onto CLOCK_MONOTONIC), counts late reads, and gives each read
 *   to the socket's armed `Tape`, if it has one. A read the tape cannot take whole comes back to Python as
 *   (fd, time, bytes | errno), untouched, for the full parser.
 * - `Tape` is one request's fast half. Armed by Python only when the chunked decoder is at a chunk boundary and
 *   the SSE parser holds nothing (after the response head, and after any read Python parsed). A read is taken only
 *   if *every* chunk in it is a lone `data:` event whose JSON is valid and of the plain token shape; otherwise
 *   nothing is changed and Python gets the read. All-or-nothing keeps one source of truth for every odd case
 *   (errors, usage-only and final chunks, a chunk with a finish_reason, [DONE], llama.cpp timings, escapes in
 *   keys, surrogates, bools as counts).
 *
 * The accounting a taken chunk does is the accumulator's (stream.py `_on_chunk`): with server counts, the
 * chunk's tokens are the cumulative count's advance (no token if it did not move); without, one token per chunk
 * with output; the first token decides which. `usage.prompt_tokens` / `completion_tokens` integers are copied to
 * the record.
 * tests/unit/test_wire.py checks every accepted payload against the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define RECV_SIZE 65536
#define MAX_EVENTS 4096
#define MAX_CHUNKS 256
#define MAX_DEPTH 32
#define LATE_READ_NS 1000000LL
#define STAMP_SLACK_NS 5000000000LL

/* ------------------------------------------------------------------------------------------------------------ */
/* A strict JSON reader that fails (returns -1) on anything it is not sure orjson reads the same way. */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
    int depth;
} Cur;

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static inline int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string at c->p (which is '"'). Sets *start and *len to the raw bytes between the quotes and *escaped when a
 * backslash occurs. Validates UTF-8 (no overlongs, no encoded surrogates, <= U+10FFFF) and escapes; a \u escape
 * of a surrogate is refused (left to orjson). */
static int str(Cur *c, const unsigned char **start, Py_ssize_t *len, int *escaped) {
    const unsigned char *p = c->p + 1, *end = c->end;
    *escaped = 0;
    *start = p;
    while (p < end) {
        unsigned char ch = *p;
        if (ch == '"') {
            *len = p - *start;
            c->p = p + 1;
            return 0;
        }
        if (ch == '\\') {
            *escaped = 1;
            if (p + 1 >= end) return -1;
            ch = p[1];
            if (ch == 'u') {
                if (p + 6 > end) return -1;
                int v = 0;
                for (int i = 2; i < 6; i++) {
                    int h = hexval(p[i]);
                    if (h < 0) return -1;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return -1;
                p += 6;
                continue;
            }
            if (ch == '"' || ch == '\\' || ch == '/' || ch == 'b' || ch == 'f' || ch == 'n' || ch == 'r' || ch == 't') {
                p += 2;
                continue;
            }
            return -1;
        }
        if (ch < 0x20) return -1;
        if (ch < 0x80) {
            p++;
            continue;
        }
        /* UTF-8 sequence */
        int n;
        unsigned int cp;
        if (ch >= 0xC2 && ch <= 0xDF) {
            n = 1;
            cp = ch & 0x1F;
        } else if (ch >= 0xE0 && ch <= 0xEF) {
            n = 2;
            cp = ch & 0x0F;
        } else if (ch >= 0xF0 && ch <= 0xF4) {
            n = 3;
            cp = ch & 0x07;
        } else {
            return -1;
        }
        if (p + n >= end) return -1;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return -1;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return -1;
        p += n + 1;
    }
    return -1;
}

/* A number. *kind: 1 = a non-negative integer of at most 18 digits (value in *ival), 2 = any other number. */
static int num(Cur *c, int *kind, long long *ival) {
    const unsigned char *p = c->p, *end = c->end;
    int neg = 0, digits = 0, frac = 0;
    long long v = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) return -1;
    if (*p == '0') {
        p++;
        digits = 1;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) v = v * 10 + (*p - '0');
            digits++;
            p++;
        }
    } else {
        return -1;
    }
    if (p < end && *p == '.') {
        frac = 1;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        frac = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        int ed = 0;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            p++;
            ed++;
        }
        if (ed > 2) return -1; /* with at most 40 characters, no overflow to infinity (orjson's error) */
    }
    if (p - c->p > 40) return -1;
    c->p = p;
    if (!neg && !frac && digits <= 18) {
        *kind = 1;
        *ival = v;
    } else {
        *kind = 2;
    }
    return 0;
}

static int lit(Cur *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return -1;
    c->p += n;
    return 0;
}

/* What a value is, for the few questions asked of it. */
enum { V_STR, V_INT, V_NUM, V_TRUE, V_FALSE, V_NULL, V_ARR, V_OBJ };

static int skip(Cur *c, int *type, int *truthy);

static inline int skip_any(Cur *c) {
    int type, truthy;
    return skip(c, &type, &truthy);
}

/* Skips the rest of an array or object whose opening bracket was consumed; *empty tells whether it had none. */
static int skip_container(Cur *c, unsigned char close, int *empty) {
    if (++c->depth > MAX_DEPTH) return -1;
    ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        *empty = 1;
        c->depth--;
        return 0;
    }
    *empty = 0;
    for (;;) {
        if (close == '}') {
            const unsigned char *s;
            Py_ssize_t n;
            int esc;
            ws(c);
            if (c->p >= c->end || *c->p != '"' || str(c, &s, &n, &esc) < 0) return -1;
            ws(c);
            if (c->p >= c->end || *c->p != ':') return -1;
            c->p++;
        }
        ws(c);
        if (skip_any(c) < 0) return -1;
        ws(c);
        if (c->p >= c->end) return -1;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == close) {
            c->p++;
            c->depth--;
            return 0;
        }
        return -1;
    }
}

/* Any value; *truthy is Python's bool() of what orjson would return (-1 where that is not known here: floats). */
static int skip(Cur *c, int *type, int *truthy) {
    if (c->p >= c->end) return -1;
    unsigned char ch = *c->p;
    if (ch == '"') {
        const unsigned char *s;
        Py_ssize_t n;
        int esc;
        if (str(c, &s, &n, &esc) < 0) return -1;
        *type = V_STR;
        *truthy = n > 0;
        return 0;
    }
    if (ch == '{' || ch == '[') {
        int empty;
        c->p++;
        if (skip_container(c, ch == '{' ? '}' : ']', &empty) < 0) return -1;
        *type = ch == '{' ? V_OBJ : V_ARR;
        *truthy = !empty;
        return 0;
    }
    if (ch == 't') {
        *type = V_TRUE;
        *truthy = 1;
        return lit(c, "true", 4);
    }
    if (ch == 'f') {
        *type = V_FALSE;
        *truthy = 0;
        return lit(c, "false", 5);
    }
    if (ch == 'n') {
        *type = V_NULL;
        *truthy = 0;
        return lit(c, "null", 4);
    }
    int kind;
    long long v;
    if (num(c, &kind, &v) < 0) return -1;
    *type = kind == 1 ? V_INT : V_NUM;
    *truthy = kind == 1 ? v != 0 : -1;
    return 0;
}

static inline int key_is(const unsigned char *s, Py_ssize_t n, const char *word) {
    size_t wn = strlen(word);
    return (size_t)n == wn && memcmp(s, word, wn) == 0;
}

/* Iterates an object's members: at '{', calls back per key with the cursor at the value. */
typedef int (*member_fn)(Cur *c, const unsigned char *key, Py_ssize_t klen, void *ctx);

static int members(Cur *c, member_fn fn, void *ctx) {
    if (c->p >= c->end || *c->p != '{') return -1;
    if (++c->depth > MAX_DEPTH) return -1;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        c->depth--;
        return 0;
    }
    for (;;) {
        const unsigned char *k;
        Py_ssize_t kn;
        int esc;
        ws(c);
        if (c->p >= c->end || *c->p != '"' || str(c, &k, &kn, &esc) < 0) return -1;
        if (esc) return -1; /* an escaped key may spell one we look for */
        ws(c);
        if (c->p >= c->end || *c->p != ':') return -1;
        c->p++;
        ws(c);
        if (fn(c, k, kn, ctx) < 0) return -1;
        ws(c);
        if (c->p >= c->end) return -1;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == '}') {
            c->p++;
            c->depth--;
            return 0;
        }
        return -1;
    }
}

/* What one chunk told us. */
typedef struct {
    int chat;
    int has_output;
    int saw_choices;     /* the last "choices" was a non-empty array starting with an object */
    int usage_dict;      /* the last "usage" was an object */
    long long pt, ct;    /* -1: absent or not an integer */
} Chunk;

static int any_truthy(Cur *c, int *out) {
    int t, tr;
    if (skip(c, &t, &tr) < 0 || tr < 0) return -1;
    *out = tr;
    return 0;
}

typedef struct {
    int content, reasoning_content, reasoning, tool_calls, refusal;
} Delta;

/* The delta fields that carry generated tokens: those of the dialect's `_choice_has_output` (openai.py). */
static int delta_member(Cur *c, const unsigned char *k, Py_ssize_t n, void *ctx) {
    Delta *d = (Delta *)ctx;
    if (key_is(k, n, "content")) return any_truthy(c, &d->content);
    if (key_is(k, n, "reasoning_content")) return any_truthy(c, &d->reasoning_content);
    if (key_is(k, n, "reasoning")) return any_truthy(c, &d->reasoning);
    if (key_is(k, n, "tool_calls")) return any_truthy(c, &d->tool_calls);
    if (key_is(k, n, "refusal")) return any_truthy(c, &d->refusal);
    return skip_any(c);
}

static int choice_member(Cur *c, const unsigned char *k, Py_ssize_t n, void *ctx) {
    Chunk *ch = (Chunk *)ctx;
    if (ch->chat && key_is(k, n, "delta")) {
        if (c->p < c->end && *c->p == '{') {
            Delta d = {0, 0, 0, 0, 0};
            if (members(c, delta_member, &d) < 0) return -1;
            ch->has_output = d.content || d.reasoning_content || d.reasoning || d.tool_calls || d.refusal;
            return 0;
        }
        ch->has_output = 0; /* a delta that is not an object carries nothing */
        return skip_any(c);
    }
    if (!ch->chat && key_is(k, n, "text")) return any_truthy(c, &ch->has_output);
    /* Why the stream ends (a string) is Python's to record: once per stream, not worth a string built here. */
    if (key_is(k, n, "finish_reason") && c->p < c->end && *c->p == '"') return -1;
    return skip_any(c);
}

/* A usage count: a non-negative integer, or "not an integer" (-1). Booleans, negatives and lists go to Python
 * (bool is an int there; as_count takes a one-element list). */
static int usage_count(Cur *c, long long *out) {
    if (c->p < c->end && (*c->p == 't' || *c->p == 'f' || *c->p == '[' || *c->p == '-')) return -1;
    const unsigned char *at = c->p;
    if (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int kind;
        long long v;
        if (num(c, &kind, &v) < 0) return -1;
        if (kind == 1) {
            *out = v;
            return 0;
        }
        if (kind == 2) {
            /* a float: only as big as orjson reads as float (not an int of 19+ digits) */
            for (const unsigned char *q = at; q < c->p; q++)
                if (*q == '.' || *q == 'e' || *q == 'E') {
                    *out = -1;
                    return 0;
                }
            return -1;
        }
    }
    *out = -1;
    return skip_any(c);
}

static int usage_member(Cur *c, const unsigned char *k, Py_ssize_t n, void *ctx) {
    Chunk *ch = (Chunk *)ctx;
    if (key_is(k, n, "prompt_tokens")) return usage_count(c, &ch->pt);
    if (key_is(k, n, "completion_tokens")) return usage_count(c, &ch->ct);
    return skip_any(c);
}

static int top_member(Cur *c, const unsigned char *k, Py_ssize_t n, void *ctx) {
    Chunk *ch = (Chunk *)ctx;
    if (key_is(k, n, "choices")) {
        /* Only a non-empty list whose first item is an object is a token chunk; anything else is Python's. */
        if (c->p >= c->end || *c->p != '[') return -1;
        if (++c->depth > MAX_DEPTH) return -1;
        c->p++;
        ws(c);
        if (c->p >= c->end || *c->p != '{') return -1;
        ch->has_output = 0;
        if (members(c, choice_member, ch) < 0) return -1;
        for (;;) {
            ws(c);
            if (c->p >= c->end) return -1;
            if (*c->p == ']') {
                c->p++;
                break;
            }
            if (*c->p != ',') return -1;
            c->p++;
            ws(c);
            if (skip_any(c) < 0) return -1;
        }
        c->depth--;
        ch->saw_choices = 1;
        return 0;
    }
    if (key_is(k, n, "usage")) {
        ch->pt = ch->ct = -1;
        if (c->p < c->end && *c->p == '{') {
            ch->usage_dict = 1;
            return members(c, usage_member, ch);
        }
        ch->usage_dict = 0;
        return skip_any(c);
    }
    if (key_is(k, n, "error") || key_is(k, n, "timings")) return -1;
    if (key_is(k, n, "object") && c->p < c->end && *c->p == '"') {
        const unsigned char *s;
        Py_ssize_t sn;
        int esc;
        if (str(c, &s, &sn, &esc) < 0 || esc || key_is(s, sn, "error")) return -1;
        return 0;
    }
    return skip_any(c);
}

static int parse_chunk(const unsigned char *p, Py_ssize_t n, Chunk *ch) {
    Cur c = {p, p + n, 0};
    ws(&c);
    if (members(&c, top_member, ch) < 0) return -1;
    ws(&c);
    if (c.p != c.end || !ch->saw_choices) return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Tape */

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
} Tape;

static PyObject *s_prompt_tokens, *s_output_tokens, *s_token_source;

static int Tape_init(Tape *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"record", "chat", "server_source", NULL};
    PyObject *record, *server_source;
    int chat;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OpO", names, &record, &chat, &server_source)) return -1;
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
    return 0;
}

static int Tape_traverse(Tape *self, visitproc visit, void *arg) {
    Py_VISIT(self->record);
    Py_VISIT(self->times_append);
    Py_VISIT(self->tokens_append);
    Py_VISIT(self->server_source);
    return 0;
}

static int Tape_clear(Tape *self) {
    Py_CLEAR(self->record);
    Py_CLEAR(self->times_append);
    Py_CLEAR(self->tokens_append);
    Py_CLEAR(self->server_source);
    return 0;
}

static void Tape_dealloc(Tape *self) {
    PyObject_GC_UnTrack(self);
    Tape_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int set_count(PyObject *record, PyObject *name, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (!o) return -1;
    int r = PyObject_SetAttr(record, name, o);
    Py_DECREF(o);
    return r;
}

static int tape_scan(Tape *self, double t, const unsigned char *data, Py_ssize_t n);

/* 1: the read was taken whole; 0: not taken, nothing changed; -1: a Python error (set). A refused read disarms
 * the tape: Python must parse it before any later read of the stream may be taken here (order). */
static int tape_take(Tape *self, double t, const unsigned char *data, Py_ssize_t n) {
    if (!self->armed) return 0;
    int r = tape_scan(self, t, data, n);
    if (r == 0) self->armed = 0;
    return r;
}

static int tape_scan(Tape *self, double t, const unsigned char *data, Py_ssize_t n) {
    if (n <= 0) return 0;
    Chunk chunks[MAX_CHUNKS];
    int count = 0;
    Py_ssize_t pos = 0;
    /* Pass 1: every chunk must be `<hex>\r\ndata: <payload>\n\n\r\n`, size = len(payload) + 8, no CR in the
     * payload, and the payload a token chunk. */
    while (pos < n) {
        if (count == MAX_CHUNKS) return 0;
        Py_ssize_t i = pos;
        unsigned long long size = 0;
        while (i < n && i - pos < 16 && hexval(data[i]) >= 0) size = size * 16 + hexval(data[i++]);
        if (i == pos || n - i < 2 || data[i] != '\r' || data[i + 1] != '\n') return 0;
        i += 2;
        if (n - i < 6 || memcmp(data + i, "data: ", 6) != 0) return 0;
        const unsigned char *payload = data + i + 6;
        const unsigned char *nl = memchr(payload, '\n', (size_t)(n - (i + 6)));
        if (!nl) return 0;
        Py_ssize_t plen = nl - payload;
        Py_ssize_t after = (nl - data);
        if (n - after < 4 || memcmp(nl, "\n\n\r\n", 4) != 0) return 0;
        if (size != (unsigned long long)plen + 8 || memchr(payload, '\r', (size_t)plen)) return 0;
        Chunk *ch = &chunks[count];
        ch->chat = self->chat;
        ch->has_output = ch->saw_choices = ch->usage_dict = 0;
        ch->pt = ch->ct = -1;
        if (parse_chunk(payload, plen, ch) < 0) return 0;
        count++;
        pos = after + 4;
    }
    /* Pass 2: the accumulator's accounting (stream.py `_on_chunk`). Counts are the server's when it sends a
     * cumulative one from the first token on; text before the count moved means they cannot be trusted. */
    for (int j = 0; j < count; j++) {
        Chunk *ch = &chunks[j];
        long long k = 0;
        int from_server = 0;
        if (self->exact != 0 && ch->usage_dict && ch->ct >= 0) {
            k = ch->ct - self->counted;
            from_server = 1;
            if (k <= 0 && ch->has_output && self->exact < 0) from_server = 0;
        }
        if (!from_server) k = ch->has_output ? 1 : 0;
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
    }
    self->last_rx = t;
    return 1;
}

static PyObject *Tape_take(Tape *self, PyObject *args) {
    double t;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "dy*", &t, &buf)) return NULL;
    int r = tape_take(self, t, (const unsigned char *)buf.buf, buf.len);
    PyBuffer_Release(&buf);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

static PyObject *Tape_arm(Tape *self, PyObject *args) {
    /* arm(counted, exact): the accumulator's state, handed over; the next reads may be taken here. */
    long long counted;
    int exact;
    if (!PyArg_ParseTuple(args, "Li", &counted, &exact)) return NULL;
    self->counted = counted;
    self->exact = exact < 0 ? -1 : exact != 0;
    self->armed = 1;
    self->live = 1;
    /* The record may have been written by Python meanwhile: write the next usage values again. */
    self->set_pt = self->set_ct = -2;
    Py_RETURN_NONE;
}

static PyObject *Tape_disarm(Tape *self, PyObject *unused) {
    /* Python takes over: (count, exact) reached here if the tape was armed since the last disarm, else None. */
    self->armed = 0;
    if (!self->live) Py_RETURN_NONE;
    self->live = 0;
    return Py_BuildValue("(Li)", self->counted, self->exact);
}

static PyMethodDef Tape_methods[] = {
    {"disarm", (PyCFunction)Tape_disarm, METH_NOARGS,
     "disarm() -> (counted, exact) | None: stop taking reads; the state if armed since the last disarm."},
    {"take", (PyCFunction)Tape_take, METH_VARARGS,
     "take(t, data) -> bool: account a read arrived at t, if it is whole token chunks; False changes nothing."},
    {"arm", (PyCFunction)Tape_arm, METH_VARARGS, "arm(counted, exact): hand over the accumulator's state."},
    {NULL}};

static PyMemberDef Tape_members[] = {
    {"armed", T_INT, offsetof(Tape, armed), READONLY, "whether the next read may be taken here"},
    {"counted", T_LONGLONG, offsetof(Tape, counted), READONLY, "tokens counted so far"},
    {"exact", T_INT, offsetof(Tape, exact), READONLY, "-1 undecided, 0 one per chunk, 1 server counts"},
    {"last_rx", T_DOUBLE, offsetof(Tape, last_rx), READONLY, "arrival time of the last read taken here"},
    {NULL}};

static PyTypeObject TapeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loadgen.protocol._wire.Tape",
    .tp_basicsize = sizeof(Tape),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The fast half of one request's stream accumulator (see the module docstring).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tape_init,
    .tp_dealloc = (destructor)Tape_dealloc,
    .tp_traverse = (traverseproc)Tape_traverse,
    .tp_clear = (inquiry)Tape_clear,
    .tp_methods = Tape_methods,
    .tp_members = Tape_members,
};

/* ------------------------------------------------------------------------------------------------------------ */
/* Drainer */

typedef struct {
    PyObject_HEAD
    long long reads, late, taken;
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
    self->reads = self->late = self->taken = 0;
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

static int append_slow(PyObject *out, int fd, double t, PyObject *what) {
    if (!what) return -1;
    PyObject *tup = Py_BuildValue("(idN)", fd, t, what);
    if (!tup) return -1;
    int r = PyList_Append(out, tup);
    Py_DECREF(tup);
    return r;
}

static PyObject *Drainer_drain(Drainer *self, PyObject *args) {
    int epfd;
    PyObject *tapes;
    if (!PyArg_ParseTuple(args, "iO!", &epfd, &PyDict_Type, &tapes)) return NULL;
    /* No wait (the event loop said the set is ready), so the GIL is kept. */
    int nev = epoll_wait(epfd, self->events, MAX_EVENTS, 0);
    if (nev < 0) {
        if (errno == EINTR) return PyList_New(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *out = PyList_New(0);
    if (!out || nev == 0) return out;
    long long woke_ns = ns_of(CLOCK_MONOTONIC);
    long long offset = ns_of(CLOCK_REALTIME) - woke_ns; /* realtime − monotonic */
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
        if (n > 0) {
            PyObject *key = PyLong_FromLong(fd);
            if (!key) goto fail;
            PyObject *tape = PyDict_GetItemWithError(tapes, key);
            Py_DECREF(key);
            if (!tape && PyErr_Occurred()) goto fail;
            if (tape && Py_IS_TYPE(tape, &TapeType)) {
                Py_INCREF(tape);
                int r = tape_take((Tape *)tape, t, self->buf, n);
                Py_DECREF(tape);
                if (r < 0) goto fail;
                if (r == 1) {
                    self->taken++;
                    continue;
                }
            }
        }
        if (append_slow(out, fd, t, PyBytes_FromStringAndSize((const char *)self->buf, n)) < 0) goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *Drainer_take_stats(Drainer *self, PyObject *unused) {
    PyObject *r = Py_BuildValue("(LLd)", self->reads, self->late, self->worst);
    self->reads = self->late = 0;
    self->worst = 0.0;
    return r;
}

static PyMethodDef Drainer_methods[] = {
    {"drain", (PyCFunction)Drainer_drain, METH_VARARGS,
     "drain(epfd, tapes) -> [(fd, t, bytes | errno)]: read every ready socket once; reads an armed tape took "
     "whole are not returned."},
    {"take_stats", (PyCFunction)Drainer_take_stats, METH_NOARGS,
     "(stamped reads, reads > 1 ms late, worst delay s) since the last call."},
    {NULL}};

static PyMemberDef Drainer_members[] = {
    {"taken", T_LONGLONG, offsetof(Drainer, taken), READONLY, "reads taken whole by a tape, since the start"},
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

static struct PyModuleDef wiremodule = {
    PyModuleDef_HEAD_INIT, "loadgen.protocol._wire", "The common case of reading a token stream, in C.", -1, NULL};

PyMODINIT_FUNC PyInit__wire(void) {
    if (PyType_Ready(&TapeType) < 0 || PyType_Ready(&DrainerType) < 0) return NULL;
    s_prompt_tokens = PyUnicode_InternFromString("prompt_tokens");
    s_output_tokens = PyUnicode_InternFromString("output_tokens");
    s_token_source = PyUnicode_InternFromString("token_source");
    if (!s_prompt_tokens || !s_output_tokens || !s_token_source) return NULL;
    PyObject *m = PyModule_Create(&wiremodule);
    if (!m) return NULL;
    Py_INCREF(&TapeType);
    Py_INCREF(&DrainerType);
    if (PyModule_AddObject(m, "Tape", (PyObject *)&TapeType) < 0 ||
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
