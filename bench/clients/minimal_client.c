/* A minimal HTTP/1.1 streaming client: the ceiling of what one core does with no measuring at all.
 *
 * N keep-alive connections on one epoll loop; each sends POST /v1/chat/completions (stream: true, usage in every
 * chunk) to bench/server.py, reads the chunked SSE reply (a chunk or an event may be split across reads anywhere),
 * counts events, token chunks (the chunks whose cumulative usage.completion_tokens grew) and tokens until [DONE]
 * and the terminating chunk, then sends the next request on the same connection. It stops after --seconds, or once
 * --requests requests have completed. It prints one JSON line: requests, chunks, events, tokens, bytes, errors and
 * its own CPU time (getrusage). Built by bench/cpu.py with `cc -O2` (no host-specific flags).
 *
 *   minimal_client --port 8100 --streams 64 --seconds 10 --max-tokens 256
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { HEAD, SIZE, SIZE_EXT, DATA, DATA_END, TRAILER };

typedef struct {
    int fd;
    int state;
    char head[4096];
    size_t head_len;
    unsigned long size;   /* chunk size being read, or bytes of the chunk still to come */
    int size_digits;
    size_t trailer_line;  /* bytes in the trailer line so far */
    int data_end_left;    /* the CRLF after a chunk's data */
    char *ev;             /* the SSE event being assembled */
    size_t ev_len, ev_cap, line_start;
    long cum;             /* last usage.completion_tokens of this reply */
    int done_seen;
    const char *out;      /* request bytes not yet written */
    size_t out_left;
    int busy;
} conn_t;

static long n_requests, n_chunks, n_events, n_tokens, n_errors, n_issued;
static long long n_bytes;
static long max_requests;
static int running = 1;
static char *request;
static size_t request_len;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fail(const char *what) {
    perror(what);
    exit(2);
}

static void build_request(const char *host, int port, int max_tokens, int prompt_words) {
    static const char *words[] = {"the", "of", "and", "to", "in", "is", "it", "you"};
    char body[65536];
    char prompt[32768];
    size_t p = 0;
    for (int i = 0; i < prompt_words && p + 16 < sizeof prompt; i++)
        p += (size_t)snprintf(prompt + p, sizeof prompt - p, "%s%s", i ? " " : "", words[i % 8]);
    prompt[p] = 0;
    int blen = snprintf(body, sizeof body,
                        "{\"model\":\"bench\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],"
                        "\"max_tokens\":%d,\"stream\":true,"
                        "\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}}",
                        prompt, max_tokens);
    size_t cap = (size_t)blen + 512;
    request = malloc(cap);
    if (!request) fail("malloc");
    request_len = (size_t)snprintf(request, cap,
                                   "POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\n"
                                   "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                                   "Content-Length: %d\r\n\r\n%s",
                                   host, port, blen, body);
}

static void send_request(int ep, conn_t *c) {
    if (!running || (max_requests && n_issued >= max_requests)) {
        c->busy = 0;
        return;
    }
    n_issued++;
    c->busy = 1;
    c->state = HEAD;
    c->head_len = 0;
    c->ev_len = c->line_start = 0;
    c->cum = 0;
    c->done_seen = 0;
    c->out = request;
    c->out_left = request_len;
    while (c->out_left) {
        ssize_t w = send(c->fd, c->out, c->out_left, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct epoll_event e = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
                return;
            }
            fail("send");
        }
        c->out += w;
        c->out_left -= (size_t)w;
    }
}

/* One SSE event, without its blank line: its data lines' payloads. */
static void on_event(conn_t *c, char *ev, size_t len) {
    char *end = ev + len;
    for (char *line = ev; line < end;) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        char *le = nl ? nl : end;
        size_t ll = (size_t)(le - line);
        if (ll && line[ll - 1] == '\r') ll--;
        if (ll >= 5 && memcmp(line, "data:", 5) == 0) {
            char *pl = line + 5;
            size_t pn = ll - 5;
            if (pn && *pl == ' ') pl++, pn--;
            if (pn == 6 && memcmp(pl, "[DONE]", 6) == 0) {
                c->done_seen = 1;
            } else {
                n_events++;
                static const char key[] = "\"completion_tokens\":";
                char *u = memmem(pl, pn, key, sizeof key - 1);
                if (u) {
                    long v = strtol(u + sizeof key - 1, NULL, 10);
                    if (v > c->cum) {
                        n_chunks++;
                        c->cum = v;
                    }
                }
            }
        }
        line = le + 1;
    }
}

/* Chunk data into the SSE event buffer; an event ends at an empty line. */
static void sse_feed(conn_t *c, const char *p, size_t n) {
    while (n) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) + 1 : n;
        if (c->ev_len + take > c->ev_cap) {
            c->ev_cap = (c->ev_len + take) * 2;
            c->ev = realloc(c->ev, c->ev_cap);
            if (!c->ev) fail("realloc");
        }
        memcpy(c->ev + c->ev_len, p, take);
        c->ev_len += take;
        p += take;
        n -= take;
        if (!nl) break;
        size_t line = c->ev_len - c->line_start;
        if (line == 1 || (line == 2 && c->ev[c->line_start] == '\r')) {
            if (c->line_start) on_event(c, c->ev, c->line_start);
            c->ev_len = c->line_start = 0;
        } else {
            c->line_start = c->ev_len;
        }
    }
}

static void error_close(int ep, conn_t *c, const char *why) {
    fprintf(stderr, "minimal_client: %s\n", why);
    n_errors++;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->busy = 0;
}

/* Parse what one read brought; returns 0 if the connection was closed on an error. */
static int on_bytes(int ep, conn_t *c, const char *p, size_t n) {
    while (n) {
        switch (c->state) {
        case HEAD: {
            size_t take = n < sizeof c->head - c->head_len ? n : sizeof c->head - c->head_len;
            if (!take) return error_close(ep, c, "response head too long"), 0;
            memcpy(c->head + c->head_len, p, take);
            size_t old = c->head_len;
            c->head_len += take;
            size_t from = old >= 3 ? old - 3 : 0;
            char *e = memmem(c->head + from, c->head_len - from, "\r\n\r\n", 4);
            if (!e) {
                p += take, n -= take;
                break;
            }
            size_t used = (size_t)(e + 4 - c->head) - old;
            p += used, n -= used;
            c->head_len = (size_t)(e - c->head);
            c->head[c->head_len] = 0;
            if (strncmp(c->head, "HTTP/1.1 200", 12) != 0) return error_close(ep, c, "status is not 200"), 0;
            if (!strcasestr(c->head, "transfer-encoding: chunked")) return error_close(ep, c, "not chunked"), 0;
            c->state = SIZE;
            c->size = 0;
            c->size_digits = 0;
            break;
        }
        case SIZE:
        case SIZE_EXT: {
            char ch = *p++;
            n--;
            if (ch == '\n') {
                if (!c->size_digits) return error_close(ep, c, "bad chunk size"), 0;
                if (c->size == 0) {
                    c->state = TRAILER;
                    c->trailer_line = 0;
                } else {
                    c->state = DATA;
                }
            } else if (ch == '\r' || c->state == SIZE_EXT) {
            } else if (ch == ';') {
                c->state = SIZE_EXT;
            } else {
                int d = ch >= '0' && ch <= '9'   ? ch - '0'
                        : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                        : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                                 : -1;
                if (d < 0 || c->size_digits > 12) return error_close(ep, c, "bad chunk size"), 0;
                c->size = c->size * 16 + (unsigned long)d;
                c->size_digits++;
            }
            break;
        }
        case DATA: {
            size_t take = n < c->size ? n : c->size;
            sse_feed(c, p, take);
            p += take, n -= take;
            c->size -= take;
            if (!c->size) {
                c->state = DATA_END;
                c->data_end_left = 2;
            }
            break;
        }
        case DATA_END:
            if (*p != (c->data_end_left == 2 ? '\r' : '\n')) return error_close(ep, c, "no CRLF after chunk"), 0;
            p++, n--;
            if (!--c->data_end_left) {
                c->state = SIZE;
                c->size = 0;
                c->size_digits = 0;
            }
            break;
        case TRAILER: {
            char ch = *p++;
            n--;
            if (ch != '\n') {
                if (ch != '\r') c->trailer_line++;
                break;
            }
            if (c->trailer_line) {  /* a trailer field: skip it */
                c->trailer_line = 0;
                break;
            }
            if (!c->done_seen) return error_close(ep, c, "reply ended without [DONE]"), 0;
            n_requests++;
            n_tokens += c->cum;
            if (n) return error_close(ep, c, "bytes after the reply"), 0;
            send_request(ep, c);
            return 1;
        }
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 8100, streams = 1, max_tokens = 64, prompt_words = 32;
    double seconds = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--port")) port = atoi(v);
        else if (!strcmp(a, "--streams")) streams = atoi(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--requests")) max_requests = atol(v);
        else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v);
        else if (!strcmp(a, "--prompt-words")) prompt_words = atoi(v);
        else goto usage;
        i++;
    }
    if (streams < 1 || port <= 0) goto usage;
    build_request(host, port, max_tokens, prompt_words);

    int ep = epoll_create1(0);
    if (ep < 0) fail("epoll_create1");
    conn_t *conns = calloc((size_t)streams, sizeof *conns);
    if (!conns) fail("calloc");
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "minimal_client: --host must be an IPv4 address\n");
        return 2;
    }
    for (int i = 0; i < streams; i++) {
        conn_t *c = &conns[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->fd < 0) fail("socket");
        if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) fail("connect");
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0) fail("fcntl");
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e) < 0) fail("epoll_ctl");
    }

    double t0 = now_s(), deadline = t0 + seconds;
    for (int i = 0; i < streams; i++) send_request(ep, &conns[i]);
    static char buf[1 << 16];
    struct epoll_event events[256];
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) running = 0;
        int busy = 0;
        for (int i = 0; i < streams && !busy; i++) busy = conns[i].busy;
        if (!busy || (!running && !max_requests)) break;
        if (!running && max_requests) {  /* a fixed count that did not finish in time */
            fprintf(stderr, "minimal_client: %ld of %ld requests done at the deadline\n", n_requests, max_requests);
            n_errors++;
            break;
        }
        int ne = epoll_wait(ep, events, 256, (int)(left * 1e3) + 1);
        if (ne < 0) {
            if (errno == EINTR) continue;
            fail("epoll_wait");
        }
        for (int j = 0; j < ne; j++) {
            conn_t *c = events[j].data.ptr;
            if (c->fd < 0) continue;
            if (events[j].events & EPOLLOUT) {
                ssize_t w = send(c->fd, c->out, c->out_left, MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) fail("send");
                if (w > 0) c->out += w, c->out_left -= (size_t)w;
                if (!c->out_left) {
                    struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
                }
            }
            if (!(events[j].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) continue;
            for (;;) {
                ssize_t r = recv(c->fd, buf, sizeof buf, 0);
                if (r < 0) {
                    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                    if (errno == EINTR) continue;
                    error_close(ep, c, strerror(errno));
                    break;
                }
                if (r == 0) {
                    error_close(ep, c, "connection closed by the server");
                    break;
                }
                n_bytes += r;
                if (!on_bytes(ep, c, buf, (size_t)r) || r < (ssize_t)sizeof buf) break;
            }
        }
    }
    double wall = now_s() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"requests\":%ld,\"chunks\":%ld,\"events\":%ld,\"tokens\":%ld,\"bytes\":%lld,\"errors\":%ld,"
           "\"streams\":%d,\"wall_s\":%.6f,\"cpu_user_s\":%.6f,\"cpu_sys_s\":%.6f}\n",
           n_requests, n_chunks, n_events, n_tokens, n_bytes, n_errors, streams, wall,
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6);
    fflush(stdout);
    return n_errors ? 1 : 0;
usage:
    fprintf(stderr, "usage: %s [--host IP] --port P [--streams N] [--seconds S] [--requests R] [--max-tokens M] "
                    "[--prompt-words W]\n", argv[0]);
    return 2;
}
