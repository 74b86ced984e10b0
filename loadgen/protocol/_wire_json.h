/* loadgen.protocol._wire's strict JSON reader (_wire_json.c), as the reader/drainer (_wire.c) uses it.
 *
 * Internal to the one extension module: no Python API, and the one non-static symbol is hidden (not exported from
 * the shared object).
 */
#ifndef LOADGEN_WIRE_JSON_H
#define LOADGEN_WIRE_JSON_H

#include <stddef.h>

#if defined(__GNUC__)
#define LG_INTERNAL __attribute__((visibility("hidden")))
#else
#define LG_INTERNAL
#endif

/* The shapes a token chunk is read as (`TokenChunkCounter`'s kind; accumulator.py `_FAST_DIALECTS`). */
#define LG_COMPLETIONS 0 /* text_completion: choices[0].text */
#define LG_CHAT 1        /* chat.completion.chunk: choices[0].delta */
#define LG_RESPONSES 2   /* the Responses API's response.output_text.delta event: delta */
#define LG_ANTHROPIC 3   /* the Messages API's content_block_delta event: delta.text of a text_delta */

/* What one token chunk told us. */
typedef struct {
    int chat;            /* the shape read (LG_COMPLETIONS, LG_CHAT, LG_RESPONSES) */
    int has_output;      /* the first choice carries generated tokens (the dialect's `_choice_output`) */
    int saw_choices;     /* the last "choices" was a non-empty array starting with an object (LG_RESPONSES: the
                          * last "type" was "response.output_text.delta"; LG_ANTHROPIC: a text_delta's event) */
    int usage_dict;      /* the last "usage" was an object */
    long long pt, ct;    /* usage.prompt_tokens / completion_tokens; -1: absent or not an integer */
    /* LG_COMPLETIONS / LG_CHAT only: */
    int usage_only;      /* the last "choices" was an empty array: the final usage-only chunk (no tokens, totals) */
    int done;            /* the payload was exactly `[DONE]` (nothing else is set) */
    const unsigned char *fin; /* choices[0].finish_reason, a string without escapes (valid UTF-8), if fin_len >= 0 */
    ptrdiff_t fin_len;
} LgChunk;

/* A hex digit's value, or -1 (the chunked framing's size line and JSON's \u escapes). */
static inline int lg_hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* 0: the n bytes at p are one JSON object of the plain token chunk shape (a non-empty "choices" list starting
 * with an object, or an empty one: the usage-only chunk; no "error"/"timings", a finish_reason string only without
 * escapes, no escaped keys, nothing orjson might read differently; or exactly `[DONE]`; for LG_RESPONSES: "type" the string "response.output_text.delta", no "error"/"timings"/"response";
 * for LG_ANTHROPIC: "type" "content_block_delta", "delta" an object of "type" "text_delta" with a string "text")
 * and *ch says what it held; -1: anything else, left to Python (*ch then means nothing). */
LG_INTERNAL int lg_parse_token_chunk(const unsigned char *p, ptrdiff_t n, int chat, LgChunk *ch);

#endif
