/* loadgen.protocol._wire, part 1 of 2: the strict JSON reader behind the token chunk recogniser.
 *
 * `lg_parse_token_chunk` answers one question about one SSE `data:` payload: is it an OpenAI chunk object of the
 * plain token shape (see _wire_json.h), and if so, did it carry output and which usage counts? It fails (-1) on
 * anything it is not sure orjson reads the same way, so the Python path stays the one source of truth for every
 * odd case. No Python API here: the reader sees bytes and fills a plain struct; _wire.c does the accounting.
 */
#include "_wire_json.h"

#include <string.h>

#define MAX_DEPTH 32

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
    int depth;
} Cur;

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* A string at c->p (which is '"'). Sets *start and *len to the raw bytes between the quotes and *escaped when a
 * backslash occurs. Validates UTF-8 (no overlongs, no encoded surrogates, <= U+10FFFF) and escapes; a \u escape
 * of a surrogate is refused (left to orjson). */
static int str(Cur *c, const unsigned char **start, ptrdiff_t *len, int *escaped) {
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
                    int h = lg_hexval(p[i]);
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
            ptrdiff_t n;
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
        ptrdiff_t n;
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

static inline int key_is(const unsigned char *s, ptrdiff_t n, const char *word) {
    size_t wn = strlen(word);
    return (size_t)n == wn && memcmp(s, word, wn) == 0;
}

/* Iterates an object's members: at '{', calls back per key with the cursor at the value. */
typedef int (*member_fn)(Cur *c, const unsigned char *key, ptrdiff_t klen, void *ctx);

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
        ptrdiff_t kn;
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

static int any_truthy(Cur *c, int *out) {
    int t, tr;
    if (skip(c, &t, &tr) < 0 || tr < 0) return -1;
    *out = tr;
    return 0;
}

typedef struct {
    int content, reasoning_content, reasoning, tool_calls, refusal;
} Delta;

/* The delta fields that carry generated tokens: those of the dialect's `_choice_output` (openai.py). */
static int delta_member(Cur *c, const unsigned char *k, ptrdiff_t n, void *ctx) {
    Delta *d = (Delta *)ctx;
    if (key_is(k, n, "content")) return any_truthy(c, &d->content);
    if (key_is(k, n, "reasoning_content")) return any_truthy(c, &d->reasoning_content);
    if (key_is(k, n, "reasoning")) return any_truthy(c, &d->reasoning);
    if (key_is(k, n, "tool_calls")) return any_truthy(c, &d->tool_calls);
    if (key_is(k, n, "refusal")) return any_truthy(c, &d->refusal);
    return skip_any(c);
}

static int choice_member(Cur *c, const unsigned char *k, ptrdiff_t n, void *ctx) {
    LgChunk *ch = (LgChunk *)ctx;
    if (ch->chat && key_is(k, n, "delta")) {
        if (c->p < c->end && *c->p == '{') {
            Delta d = {0, 0, 0, 0, 0};
            if (members(c, delta_member, &d) < 0) return -1;
            /* Reasoning text (vLLM, SGLang, DeepSeek, llama.cpp): the record keeps which chunks were thinking
             * (measure/reasoning.py), so such a chunk is Python's, as few as a stream's thoughts are. So is a tool
             * call's piece (measure/tool_calls.py): the record keeps which chunks were one. */
            if (d.reasoning_content || d.reasoning || d.tool_calls) return -1;
            ch->has_output = d.content || d.tool_calls || d.refusal;
            return 0;
        }
        ch->has_output = 0; /* a delta that is not an object carries nothing */
        return skip_any(c);
    }
    if (!ch->chat && key_is(k, n, "text")) return any_truthy(c, &ch->has_output);
    /* Why the stream ends: a plain string is handed back as it is (what orjson makes of it: no escapes, valid
     * UTF-8); one with escapes is Python's; anything else is no reason (the dialect's `type(finish) is str`). The
     * last one wins, as in orjson. */
    if (key_is(k, n, "finish_reason")) {
        ch->fin_len = -1;
        if (c->p < c->end && *c->p == '"') {
            const unsigned char *s;
            ptrdiff_t sn;
            int esc;
            if (str(c, &s, &sn, &esc) < 0 || esc) return -1;
            ch->fin = s;
            ch->fin_len = sn;
            return 0;
        }
    }
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

static int usage_member(Cur *c, const unsigned char *k, ptrdiff_t n, void *ctx) {
    LgChunk *ch = (LgChunk *)ctx;
    if (key_is(k, n, "prompt_tokens")) return usage_count(c, &ch->pt);
    if (key_is(k, n, "completion_tokens")) return usage_count(c, &ch->ct);
    /* Cached prompt tokens (vLLM / OpenAI final usage): once per stream, Python's to record. */
    if (key_is(k, n, "prompt_tokens_details") && c->p < c->end && *c->p == '{') return -1;
    /* Reasoning tokens (OpenAI's final usage): Python's to record, when they are an object to read. */
    if (key_is(k, n, "completion_tokens_details") && c->p < c->end && *c->p == '{') return -1;
    return skip_any(c);
}

static int top_member(Cur *c, const unsigned char *k, ptrdiff_t n, void *ctx) {
    LgChunk *ch = (LgChunk *)ctx;
    if (key_is(k, n, "choices")) {
        /* A non-empty list whose first item is an object is a token chunk, an empty one the usage-only chunk
         * (the dialect's `not choices`); anything else is Python's. The last "choices" decides, as in orjson. */
        if (c->p >= c->end || *c->p != '[') return -1;
        if (++c->depth > MAX_DEPTH) return -1;
        c->p++;
        ws(c);
        ch->has_output = ch->saw_choices = ch->usage_only = 0;
        ch->fin_len = -1;
        if (c->p < c->end && *c->p == ']') {
            c->p++;
            c->depth--;
            ch->usage_only = 1;
            return 0;
        }
        if (c->p >= c->end || *c->p != '{') return -1;
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
        ptrdiff_t sn;
        int esc;
        if (str(c, &s, &sn, &esc) < 0 || esc || key_is(s, sn, "error")) return -1;
        return 0;
    }
    return skip_any(c);
}

/* The Responses API's answer delta (dialects/responses.py `parse`): `type` decides, `delta`'s truth is the output;
 * duplicate keys are read as orjson does (the last one wins). Whatever else Python reads there is Python's. */
static int responses_member(Cur *c, const unsigned char *k, ptrdiff_t n, void *ctx) {
    LgChunk *ch = (LgChunk *)ctx;
    if (key_is(k, n, "type")) {
        const unsigned char *s;
        ptrdiff_t sn;
        int esc;
        ch->saw_choices = 0;
        if (c->p >= c->end || *c->p != '"') return skip_any(c);
        if (str(c, &s, &sn, &esc) < 0) return -1;
        ch->saw_choices = !esc && key_is(s, sn, "response.output_text.delta");
        return 0;
    }
    if (key_is(k, n, "delta")) return any_truthy(c, &ch->has_output);
    /* llama.cpp's timings_per_token (its count), an error, a response object: Python's. */
    if (key_is(k, n, "timings") || key_is(k, n, "error") || key_is(k, n, "response")) return -1;
    return skip_any(c);
}

/* The Messages API's answer delta (dialects/anthropic.py `parse`): a content_block_delta whose delta is a
 * text_delta with a string text (its truth is the output). Thinking and tool input deltas mark their chunks, and
 * any other delta carries nothing: Python's. Duplicate keys are read as orjson does (the last one wins). */
typedef struct {
    int is_text, text_str, text_truthy;
} AnthDelta;

typedef struct {
    LgChunk *ch;
    int is_delta, delta_ok;
} Anth;

/* *is: the string at c->p is `word` (unescaped); a value that is not a string is skipped and is not it. */
static int str_is(Cur *c, const char *word, int *is) {
    const unsigned char *s;
    ptrdiff_t sn;
    int esc;
    *is = 0;
    if (c->p >= c->end || *c->p != '"') return skip_any(c);
    if (str(c, &s, &sn, &esc) < 0) return -1;
    *is = !esc && key_is(s, sn, word);
    return 0;
}

static int anthropic_delta_member(Cur *c, const unsigned char *k, ptrdiff_t n, void *ctx) {
    AnthDelta *d = (AnthDelta *)ctx;
    if (key_is(k, n, "type")) return str_is(c, "text_delta", &d->is_text);
    if (key_is(k, n, "text")) {
        d->text_str = c->p < c->end && *c->p == '"';
        if (!d->text_str) return skip_any(c);
        return any_truthy(c, &d->text_truthy);
    }
    return skip_any(c);
}

static int anthropic_member(Cur *c, const unsigned char *k, ptrdiff_t n, void *ctx) {
    Anth *a = (Anth *)ctx;
    if (key_is(k, n, "type")) return str_is(c, "content_block_delta", &a->is_delta);
    if (key_is(k, n, "delta")) {
        a->delta_ok = 0;
        if (c->p >= c->end || *c->p != '{') return skip_any(c);
        AnthDelta d = {0, 0, 0};
        if (members(c, anthropic_delta_member, &d) < 0) return -1;
        a->delta_ok = d.is_text && d.text_str;
        a->ch->has_output = d.text_truthy;
        return 0;
    }
    if (key_is(k, n, "error")) return -1;
    return skip_any(c);
}

int lg_parse_token_chunk(const unsigned char *p, ptrdiff_t n, int chat, LgChunk *ch) {
    ch->chat = chat;
    ch->has_output = ch->saw_choices = ch->usage_dict = ch->usage_only = ch->done = 0;
    ch->pt = ch->ct = -1;
    ch->fin = NULL;
    ch->fin_len = -1;
    if (chat == LG_CHAT || chat == LG_COMPLETIONS) {
        /* The end marker: the dialect compares the payload's bytes, so must this. */
        if (n == 6 && memcmp(p, "[DONE]", 6) == 0) {
            ch->done = 1;
            return 0;
        }
    }
    Cur c = {p, p + n, 0};
    ws(&c);
    if (chat == LG_ANTHROPIC) {
        Anth a = {ch, 0, 0};
        if (members(&c, anthropic_member, &a) < 0) return -1;
        ch->saw_choices = a.is_delta && a.delta_ok;
    } else if (members(&c, chat == LG_RESPONSES ? responses_member : top_member, ch) < 0) {
        return -1;
    }
    ws(&c);
    if (c.p != c.end || !(ch->saw_choices || ch->usage_only)) return -1;
    return 0;
}
