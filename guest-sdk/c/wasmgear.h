/*
 * wasmgear.h: write wasmgear job handlers in C.
 *
 * A wasmgear worker runs every job in a fresh instance of a WebAssembly component. This
 * header-only helper turns one C function into such a component, on top of the bindings
 * that `wasmgear bindings c gen/` generates for the `resumable` world of `wit/job.wit`, named
 * `job` (`job.h`, `job.c`, `job_component_type.o`):
 *
 *     #include "job.h"
 *     #include "wasmgear.h"
 *
 *     static wasmgear_result reverse(const wasmgear_job *job, const uint8_t *input, size_t len) {
 *         wasmgear_log_info("reversing %zu bytes for job %s", len, job->id);
 *         uint8_t *out = malloc(len ? len : 1);
 *         if (!out) return wasmgear_retry("out of memory");
 *         for (size_t i = 0; i < len; i++) out[i] = input[len - 1 - i];
 *         return wasmgear_ok_take(out, len);
 *     }
 *
 *     WASMGEAR_JOB(reverse)
 *
 * The handler gets the job being run and the job's input bytes, and returns a
 * `wasmgear_result`: made by `wasmgear_ok*` (the output bytes), `wasmgear_retry(fmt, ...)`
 * (a transient failure: the queue runs the job again, with backoff, while attempts remain)
 * or `wasmgear_fail(fmt, ...)` (a permanent failure: the job fails for good at once).
 * `WASMGEAR_JOB(fn)` (once per component, at file scope) defines the component's export.
 * While it runs, the handler can report `wasmgear_progress`, write to the job's log
 * (`wasmgear_log_info` and friends, printf-style), ask `wasmgear_cancelled()`, read the
 * settings its manifest grants (`wasmgear_config`), enqueue child jobs (`wasmgear_enqueue`,
 * `wasmgear_wait`), read its dependencies (`wasmgear_dependencies_next`), and save a
 * checkpoint its next attempt resumes from (`wasmgear_checkpoint_save`,
 * `wasmgear_checkpoint_load`, `wasmgear_resume_each`: wasmgear_checkpoint.h).
 *
 * A batch plugin includes the bindings of the `batch` world instead (`wasmgear bindings c
 * --world batch gen/` writes `batch.h`, `batch.c`, `batch_component_type.o`) and exports a
 * batch handler with `WASMGEAR_BATCH(fn)` (wasmgear_batch.h); progress, child jobs,
 * dependencies and checkpoints belong to one job and are left out then.
 *
 * Memory and ownership (the rules of the generated bindings, handled here):
 *  - Everything the host passes in (the job's id and function, the input bytes) is
 *    allocated by the host in this instance's memory with `cabi_realloc` (= realloc) and is
 *    owned by the guest. WASMGEAR_JOB copies `id`/`function` into NUL-terminated strings and
 *    frees the host's copies and the input once the handler returns: `job` and `input` are
 *    valid only during the call. Never return, keep or free them yourself.
 *  - The output or error message returned from `run` is freed with `free()` by the
 *    bindings' post-return function (`cabi_post_...#run`) after the host copied it out,
 *    when its length is not 0. So it must be a heap block of its own (never a string
 *    literal, a static or a pointer into another block): the `wasmgear_ok*`, `wasmgear_retry`
 *    and `wasmgear_fail` helpers always make one. A `wasmgear_result` is owned by whoever
 *    holds it; returning it hands it to the SDK (`wasmgear_result_free` drops one unused).
 *  - Strings passed *to* the host (log lines, progress messages, config keys) are borrowed
 *    for the call only: the helpers pass your buffers (or a temporary) and you keep them.
 *  - A string the host returns (`config.get`) is allocated in guest memory and owned by the
 *    caller; `wasmgear_config` hands it over as a NUL-terminated heap string: `free()` it.
 *  - WIT strings must be valid UTF-8, or the host traps the instance. The helpers replace
 *    invalid sequences in log lines, progress messages, config keys and error messages with
 *    U+FFFD, so formatting arbitrary bytes into them is safe. Output bytes are passed as is.
 *
 * Out of memory: the helpers call `abort()` (a trap: the job ends without a result), as
 * the bindings' `cabi_realloc` does.
 *
 * Include the generated `job.h` (or `batch.h`) before this header (`job.h` is included here
 * when neither was). wasmgear_checkpoint.h and wasmgear_batch.h sit beside this header and
 * are included by it: include only this one.
 */
#ifndef WASMGEAR_H
#define WASMGEAR_H

/* The world the bindings are for: a batch plugin's (`batch.h`), else a one-job plugin's. The
 * helpers both share name the bindings' types through these. */
#ifdef __BINDINGS_BATCH_H
#define WASMGEAR__BATCH 1
typedef batch_string_t wasmgear__string_t;
typedef batch_list_u8_t wasmgear__bytes_t;
#define wasmgear__string_free batch_string_free
#else
#ifndef __BINDINGS_JOB_H
#include "job.h"
#endif
typedef job_string_t wasmgear__string_t;
typedef job_list_u8_t wasmgear__bytes_t;
#define wasmgear__string_free job_string_free
#endif

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define WASMGEAR__PRINTF(fmt, args) __attribute__((__format__(__printf__, fmt, args)))
#else
#define WASMGEAR__PRINTF(fmt, args)
#endif

/* ---- the job ----------------------------------------------------------------------- */

/* What the worker tells a handler about the job it is running (valid during the call). */
typedef struct wasmgear_job {
    const char *id;          /* the job's id, unique within the queue, e.g. "resize:1042" */
    const char *function;    /* the function the job was enqueued for */
    uint32_t attempt;        /* 1 the first time, 2 on the first retry, and so on */
    uint32_t max_attempts;   /* how many attempts the job may have in all */
    uint64_t enqueued_at_ms; /* when it was enqueued, ms since the Unix epoch (queue clock) */
    uint64_t timeout_ms;     /* how long the handler may run before the worker stops it */
} wasmgear_job;

/* Whether a retry from this attempt would still fail the job for good. */
static inline bool wasmgear_is_last_attempt(const wasmgear_job *job) {
    return job->attempt >= job->max_attempts;
}

/* ---- results ----------------------------------------------------------------------- */

typedef enum wasmgear_status {
    WASMGEAR_OK = 0,    /* `data` holds the output bytes */
    WASMGEAR_RETRY = 1, /* WIT job-error.retry: `data` holds the message (UTF-8) */
    WASMGEAR_FAIL = 2,  /* WIT job-error.fail: `data` holds the message (UTF-8) */
} wasmgear_status;

/* What a handler returns. `data` is a malloc'd block owned by the result (NULL when `len`
 * is 0); make results with the helpers below rather than by hand. */
typedef struct wasmgear_result {
    wasmgear_status status;
    uint8_t *data;
    size_t len;
} wasmgear_result;

static inline void *wasmgear__alloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* The output `len` bytes at `data`, copied. */
static inline wasmgear_result wasmgear_ok(const void *data, size_t len) {
    wasmgear_result r = {WASMGEAR_OK, NULL, 0};
    if (len > 0) {
        r.data = (uint8_t *)wasmgear__alloc(len);
        memcpy(r.data, data, len);
        r.len = len;
    }
    return r;
}

/* The output NUL-terminated string `s` (without the NUL), copied. */
static inline wasmgear_result wasmgear_ok_str(const char *s) {
    return wasmgear_ok(s, strlen(s));
}

/* The output `len` bytes at `data`, a block from malloc/realloc that the result takes
 * over (no copy): do not use or free it afterwards. */
static inline wasmgear_result wasmgear_ok_take(void *data, size_t len) {
    wasmgear_result r = {WASMGEAR_OK, (uint8_t *)data, len};
    if (len == 0) {
        free(data);
        r.data = NULL;
    }
    return r;
}

/* No output (an empty list of bytes). */
static inline wasmgear_result wasmgear_ok_empty(void) {
    wasmgear_result r = {WASMGEAR_OK, NULL, 0};
    return r;
}

/* A printf-style message in a fresh heap block; *len gets its length. */
static inline char *wasmgear__vformat(size_t *len, const char *fmt, va_list ap) {
    char small[256];
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) n = 0;
    char *s = (char *)wasmgear__alloc((size_t)n + 1);
    if ((size_t)n < sizeof small)
        memcpy(s, small, (size_t)n + 1);
    else
        vsnprintf(s, (size_t)n + 1, fmt, again);
    va_end(again);
    *len = (size_t)n;
    return s;
}

static inline wasmgear_result wasmgear__error(wasmgear_status status, const char *fmt, va_list ap) {
    wasmgear_result r;
    r.status = status;
    r.data = (uint8_t *)wasmgear__vformat(&r.len, fmt, ap);
    return r;
}

/* A transient failure: the queue runs the job again later, while attempts remain.
 * printf-style; pass arbitrary text as wasmgear_retry("%s", text). */
static inline WASMGEAR__PRINTF(1, 2) wasmgear_result wasmgear_retry(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wasmgear_result r = wasmgear__error(WASMGEAR_RETRY, fmt, ap);
    va_end(ap);
    return r;
}

/* A permanent failure (bad input, a bug): the job fails for good at once.
 * printf-style; pass arbitrary text as wasmgear_fail("%s", text). */
static inline WASMGEAR__PRINTF(1, 2) wasmgear_result wasmgear_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wasmgear_result r = wasmgear__error(WASMGEAR_FAIL, fmt, ap);
    va_end(ap);
    return r;
}

/* Frees a result that will not be returned. */
static inline void wasmgear_result_free(wasmgear_result *r) {
    free(r->data);
    r->data = NULL;
    r->len = 0;
}

/* ---- a growable byte buffer, to build outputs ---------------------------------------- */

typedef struct wasmgear_buf {
    uint8_t *data; /* malloc'd, or NULL while empty */
    size_t len;
    size_t cap;
} wasmgear_buf; /* start with: wasmgear_buf b = {0}; */

static inline void wasmgear_buf_reserve(wasmgear_buf *b, size_t extra) {
    if (b->cap - b->len >= extra) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2) abort();
        cap *= 2;
    }
    uint8_t *p = (uint8_t *)realloc(b->data, cap);
    if (!p) abort();
    b->data = p;
    b->cap = cap;
}

static inline void wasmgear_buf_append(wasmgear_buf *b, const void *data, size_t len) {
    if (len == 0) return;
    wasmgear_buf_reserve(b, len);
    memcpy(b->data + b->len, data, len);
    b->len += len;
}

static inline void wasmgear_buf_putc(wasmgear_buf *b, char c) {
    wasmgear_buf_reserve(b, 1);
    b->data[b->len++] = (uint8_t)c;
}

static inline void wasmgear_buf_puts(wasmgear_buf *b, const char *s) {
    wasmgear_buf_append(b, s, strlen(s));
}

static inline WASMGEAR__PRINTF(2, 3) void wasmgear_buf_printf(wasmgear_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t len;
    char *s = wasmgear__vformat(&len, fmt, ap);
    va_end(ap);
    wasmgear_buf_append(b, s, len);
    free(s);
}

static inline void wasmgear_buf_free(wasmgear_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* The buffer's bytes as the output; the result takes them over and `b` is left empty. */
static inline wasmgear_result wasmgear_ok_buf(wasmgear_buf *b) {
    wasmgear_result r = wasmgear_ok_take(b->data, b->len);
    b->data = NULL;
    b->len = b->cap = 0;
    return r;
}

/* ---- UTF-8 ------------------------------------------------------------------------- */

/* The length of the valid UTF-8 sequence at s[0..len) (1 to 4), or 0 when it is not one. */
static inline size_t wasmgear_utf8_seq(const uint8_t *s, size_t len) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (len >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (len < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (c < 0xF5) {
        if (len < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

/* The offset of the first byte of s[0..len) that is not valid UTF-8, or `len`. */
static inline size_t wasmgear_utf8_valid_up_to(const void *data, size_t len) {
    const uint8_t *s = (const uint8_t *)data;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = wasmgear_utf8_seq(s + i, len - i);
        if (n == 0) return i;
        i += n;
    }
    return len;
}

/* s[0..len) with every invalid sequence replaced by U+FFFD, in a fresh heap block. */
static inline uint8_t *wasmgear__utf8_repair(const uint8_t *s, size_t len, size_t *out_len) {
    uint8_t *out = (uint8_t *)wasmgear__alloc(len * 3 + 1);
    size_t o = 0, i = 0;
    while (i < len) {
        size_t n = wasmgear_utf8_seq(s + i, len - i);
        if (n == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, s + i, n);
            o += n;
            i += n;
        }
    }
    *out_len = o;
    return out;
}

/* A WIT string borrowing s[0..len), or a repaired copy put in *owned (free it after). */
static inline wasmgear__string_t wasmgear__wit_str(const char *s, size_t len, uint8_t **owned) {
    wasmgear__string_t w;
    *owned = NULL;
    if (wasmgear_utf8_valid_up_to(s, len) == len) {
        w.ptr = (uint8_t *)s; /* borrowed: the import only reads it */
        w.len = len;
    } else {
        *owned = wasmgear__utf8_repair((const uint8_t *)s, len, &w.len);
        w.ptr = *owned;
    }
    return w;
}

/* Appends text[0..len) to `b` in double quotes, with backslashes, quotes and control
 * characters escaped as the Rust SDK's messages quote text (Rust's `{:?}`: `"a\"b"`,
 * `"\u{1}"`) and invalid UTF-8 shown as U+FFFD, so that an error message reads the same from
 * a plugin in any language. (Other Unicode is left as it is.) */
static inline void wasmgear_buf_quote(wasmgear_buf *b, const void *text, size_t len) {
    const uint8_t *s = (const uint8_t *)text;
    wasmgear_buf_putc(b, '"');
    for (size_t i = 0; i < len;) {
        size_t n = wasmgear_utf8_seq(s + i, len - i);
        if (n == 0) { /* not UTF-8 */
            wasmgear_buf_puts(b, "\xEF\xBF\xBD");
            i++;
            continue;
        }
        /* The code point, for the sequences that may need escaping (up to U+07FF). */
        uint32_t c = n == 1 ? s[i] : n == 2 ? (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F) : 0x800;
        switch (c) {
        case '\0': wasmgear_buf_puts(b, "\\0"); break;
        case '\t': wasmgear_buf_puts(b, "\\t"); break;
        case '\r': wasmgear_buf_puts(b, "\\r"); break;
        case '\n': wasmgear_buf_puts(b, "\\n"); break;
        case '\\': wasmgear_buf_puts(b, "\\\\"); break;
        case '"': wasmgear_buf_puts(b, "\\\""); break;
        default:
            if (c < 0x20 || (c >= 0x7F && c <= 0x9F))
                wasmgear_buf_printf(b, "\\u{%x}", (unsigned)c);
            else
                wasmgear_buf_append(b, s + i, n);
        }
        i += n;
    }
    wasmgear_buf_putc(b, '"');
}

/* ---- calls into the worker ----------------------------------------------------------- */

/* Log levels (the WIT `log.level`), from the most detailed to the most severe. */
#define WASMGEAR_TRACE WASMGEAR_JOB_LOG_LEVEL_TRACE
#define WASMGEAR_DEBUG WASMGEAR_JOB_LOG_LEVEL_DEBUG
#define WASMGEAR_INFO WASMGEAR_JOB_LOG_LEVEL_INFO
#define WASMGEAR_WARN WASMGEAR_JOB_LOG_LEVEL_WARN
#define WASMGEAR_ERROR WASMGEAR_JOB_LOG_LEVEL_ERROR

static inline void wasmgear_vlog(wasmgear_job_log_level_t level, const char *fmt, va_list ap) {
    size_t len;
    char *s = wasmgear__vformat(&len, fmt, ap);
    uint8_t *owned;
    wasmgear__string_t m = wasmgear__wit_str(s, len, &owned);
    wasmgear_job_log_write(level, &m);
    free(owned);
    free(s);
}

/* Writes one printf-style line to the job's log at `level` (WASMGEAR_INFO, ...). The worker
 * cuts long lines and rate-limits floods; logging never fails and never blocks. */
static inline WASMGEAR__PRINTF(2, 3) void wasmgear_log(wasmgear_job_log_level_t level,
                                                      const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wasmgear_vlog(level, fmt, ap);
    va_end(ap);
}

#define WASMGEAR__LOG_FN(name, level)                                                       \
    static inline WASMGEAR__PRINTF(1, 2) void name(const char *fmt, ...) {                 \
        va_list ap;                                                                          \
        va_start(ap, fmt);                                                                   \
        wasmgear_vlog(level, fmt, ap);                                                       \
        va_end(ap);                                                                          \
    }
WASMGEAR__LOG_FN(wasmgear_log_trace, WASMGEAR_TRACE)
WASMGEAR__LOG_FN(wasmgear_log_debug, WASMGEAR_DEBUG)
WASMGEAR__LOG_FN(wasmgear_log_info, WASMGEAR_INFO)
WASMGEAR__LOG_FN(wasmgear_log_warn, WASMGEAR_WARN)
WASMGEAR__LOG_FN(wasmgear_log_error, WASMGEAR_ERROR)
#undef WASMGEAR__LOG_FN

/* Whether the job has been asked to stop (cancelled, lease lost, worker shutting down).
 * Long handlers check it between steps and, once true, return an error soon. */
static inline bool wasmgear_cancelled(void) {
    return wasmgear_job_cancel_cancelled();
}

/* The value of configuration key `key` granted by the plugin's manifest (`[config]` in
 * `NAME.toml`) as a NUL-terminated heap string the caller must free(), or NULL when the
 * manifest does not set it. (A value containing NUL bytes reads as cut at the first.) */
static inline char *wasmgear_config(const char *key) {
    uint8_t *owned;
    wasmgear__string_t k = wasmgear__wit_str(key, strlen(key), &owned);
    wasmgear__string_t v = {NULL, 0};
    bool some = wasmgear_job_config_get(&k, &v);
    free(owned);
    if (!some) return NULL;
    char *s;
    if (v.len == 0) {
        /* An empty string's pointer is not a heap block (cabi_realloc of size 0): never
         * free it. */
        s = (char *)wasmgear__alloc(1);
    } else {
        /* The host allocated `v` with cabi_realloc (= realloc): grow it in place. */
        s = (char *)realloc(v.ptr, v.len + 1);
        if (!s) abort();
    }
    s[v.len] = '\0';
    return s;
}

/* ---- the entry point ------------------------------------------------------------------ */

/* A job handler: returns the output or an error for `input[0..len)` (never NULL). */
typedef wasmgear_result (*wasmgear_handler)(const wasmgear_job *job, const uint8_t *input,
                                            size_t len);

static inline char *wasmgear__cstr(const wasmgear__string_t *s) {
    char *c = (char *)wasmgear__alloc(s->len + 1);
    if (s->len) memcpy(c, s->ptr, s->len);
    c[s->len] = '\0';
    return c;
}

/* Settles a handler's result `r` (taken over) for the WIT: true with `*out` the output
 * bytes (freed by the bindings' post-return function when not empty), or false with `*err`
 * the error, its message repaired to UTF-8 when it was not (see the ownership notes at the
 * top). */
static inline bool wasmgear__settle(wasmgear_result r, wasmgear__bytes_t *out,
                                    wasmgear_job_types_job_error_t *err) {
    if (r.status == WASMGEAR_OK && (r.data != NULL || r.len == 0)) {
        out->ptr = r.len ? r.data : NULL;
        out->len = r.len;
        if (!r.len) free(r.data);
        return true;
    }

    wasmgear__string_t message = {NULL, 0};
    if (r.status == WASMGEAR_OK) { /* data NULL with len > 0: a bug in the handler */
        r = wasmgear_fail("handler returned a NULL output of %zu bytes", r.len);
    } else if (r.status != WASMGEAR_RETRY && r.status != WASMGEAR_FAIL) {
        int status = (int)r.status;
        wasmgear_result_free(&r);
        r = wasmgear_fail("handler returned an unknown status %d", status);
    }
    if (r.len > 0 && r.data != NULL) {
        if (wasmgear_utf8_valid_up_to(r.data, r.len) == r.len) {
            message.ptr = r.data; /* freed by the post-return function */
            message.len = r.len;
        } else {
            message.ptr = wasmgear__utf8_repair(r.data, r.len, &message.len);
            free(r.data);
        }
    } else {
        free(r.data);
    }
    if (r.status == WASMGEAR_RETRY) {
        err->tag = WASMGEAR_JOB_TYPES_JOB_ERROR_RETRY;
        err->val.retry = message;
    } else {
        err->tag = WASMGEAR_JOB_TYPES_JOB_ERROR_FAIL;
        err->val.fail = message;
    }
    return false;
}

#ifdef WASMGEAR__BATCH
#include "wasmgear_batch.h"
#else /* a one-job plugin: progress, child jobs, dependencies, checkpoints, WASMGEAR_JOB */

/* ---- progress ------------------------------------------------------------------------- */

/* Reports that `done` units of `total` are finished (`total` 0: unknown), with an optional
 * short message (NULL for none). Reports may be coalesced; the last one always arrives. */
static inline void wasmgear_progress(uint64_t done, uint64_t total, const char *message) {
    if (!message) {
        wasmgear_job_progress_report(done, total, NULL);
        return;
    }
    uint8_t *owned;
    wasmgear__string_t m = wasmgear__wit_str(message, strlen(message), &owned);
    wasmgear_job_progress_report(done, total, &m);
    free(owned);
}

/* wasmgear_progress with a printf-style message. */
static inline WASMGEAR__PRINTF(3, 4) void wasmgear_progressf(uint64_t done, uint64_t total,
                                                            const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t len;
    char *s = wasmgear__vformat(&len, fmt, ap);
    va_end(ap);
    uint8_t *owned;
    wasmgear__string_t m = wasmgear__wit_str(s, len, &owned);
    wasmgear_job_progress_report(done, total, &m);
    free(owned);
    free(s);
}

/* ---- child jobs ------------------------------------------------------------------------ */

/* Enqueues a job of `function` with input[0..len) as a child of the running job (the
 * manifest must grant it: `[jobs] enqueue = ["FUNCTION"]`, up to `max_children` per job).
 * `key` (NULL: its function and input, counted among the parent's children alike in both)
 * names the child within its parent: a retried parent gets the same child back. Returns the child's id (`FUNCTION:N`)
 * as a heap string the caller must free(), or NULL with `*error` (if not NULL) set to a heap
 * string saying why (free it too). */
static inline char *wasmgear_enqueue(const char *function, const void *input, size_t len,
                                     const char *key, char **error) {
    uint8_t *owned_function, *owned_key = NULL;
    wasmgear__string_t f = wasmgear__wit_str(function, strlen(function), &owned_function);
    wasmgear_job_jobs_child_options_t options;
    memset(&options, 0, sizeof options);
    if (key) {
        options.key.is_some = true;
        options.key.val = wasmgear__wit_str(key, strlen(key), &owned_key);
    }
    job_list_u8_t in = {(uint8_t *)input, len};
    wasmgear__string_t id = {NULL, 0}, err = {NULL, 0};
    bool ok = wasmgear_job_jobs_enqueue(&f, &in, &options, &id, &err);
    free(owned_function);
    free(owned_key);
    if (ok) {
        char *text = wasmgear__cstr(&id);
        wasmgear__string_free(&id);
        if (error) *error = NULL;
        return text;
    }
    if (error) *error = wasmgear__cstr(&err);
    wasmgear__string_free(&err);
    return NULL;
}

/* How a child job ended, or that waiting for it failed. */
typedef enum {
    WASMGEAR_CHILD_SUCCEEDED,
    WASMGEAR_CHILD_FAILED,
    WASMGEAR_CHILD_CANCELLED,
    /* Waiting failed (the time ran out: the job goes on; or no such job). */
    WASMGEAR_CHILD_NOT_ENDED,
} wasmgear_child_state;

/* Waits up to `timeout_ms` for job `id` to end. `*data` gets, as a NUL-terminated heap block
 * the caller must free() (NULL when cancelled), its output when it succeeded, its message
 * when it failed, or why waiting failed; `*len` its length (without the NUL). */
static inline wasmgear_child_state wasmgear_wait(const char *id, uint64_t timeout_ms, char **data,
                                                 size_t *len) {
    uint8_t *owned;
    wasmgear__string_t w = wasmgear__wit_str(id, strlen(id), &owned);
    wasmgear_job_jobs_outcome_t outcome;
    wasmgear__string_t err = {NULL, 0};
    bool ok = wasmgear_job_jobs_wait(&w, timeout_ms, &outcome, &err);
    free(owned);
    *data = NULL;
    *len = 0;
    if (!ok) {
        *data = wasmgear__cstr(&err);
        *len = err.len;
        wasmgear__string_free(&err);
        return WASMGEAR_CHILD_NOT_ENDED;
    }
    wasmgear_child_state state = WASMGEAR_CHILD_CANCELLED;
    if (outcome.tag == WASMGEAR_JOB_JOBS_OUTCOME_SUCCEEDED) {
        wasmgear__string_t out = {outcome.val.succeeded.ptr, outcome.val.succeeded.len};
        *data = wasmgear__cstr(&out);
        *len = out.len;
        state = WASMGEAR_CHILD_SUCCEEDED;
    } else if (outcome.tag == WASMGEAR_JOB_JOBS_OUTCOME_FAILED) {
        *data = wasmgear__cstr(&outcome.val.failed);
        *len = outcome.val.failed.len;
        state = WASMGEAR_CHILD_FAILED;
    }
    wasmgear_job_jobs_outcome_free(&outcome);
    return state;
}

/* ---- dependencies ---------------------------------------------------------------------- */

/* How a dependency stands. */
typedef enum {
    WASMGEAR_DEPENDENCY_SUCCEEDED,  /* its output can be read */
    WASMGEAR_DEPENDENCY_FAILED,     /* `error` says why */
    WASMGEAR_DEPENDENCY_CANCELLED,
    WASMGEAR_DEPENDENCY_UNFINISHED, /* it has not ended yet */
    WASMGEAR_DEPENDENCY_MISSING,    /* not kept: never made, or forgotten after its retention */
} wasmgear_dependency_state;

/* One job the running job waited for (its `after` list). Its strings are heap blocks:
 * release them with wasmgear_dependency_free(). */
typedef struct {
    uint32_t position; /* its place in the `after` list, from 0 */
    char *id;          /* for example `resize:17` */
    char *function;
    wasmgear_dependency_state state;
    uint64_t output_size; /* 0 unless it succeeded */
    char *error;          /* the message it failed or was cancelled with, or NULL */
} wasmgear_dependency;

static inline void wasmgear_dependency_free(wasmgear_dependency *d) {
    free(d->id);
    free(d->function);
    free(d->error);
    d->id = d->function = d->error = NULL;
}

/* A walk over the running job's dependencies in the order of its `after` list, a page at a
 * time: start it with wasmgear_dependencies_begin(), take each with
 * wasmgear_dependencies_next(), and end it with wasmgear_dependencies_end(). */
typedef struct {
    uint32_t next;
    wasmgear_job_dependencies_list_dependency_t page;
    size_t at;
    bool last;
} wasmgear_dependencies;

#define WASMGEAR__DEPENDENCY_PAGE 100
#define WASMGEAR__OUTPUT_PIECE (1024u * 1024u)

static inline void wasmgear_dependencies_begin(wasmgear_dependencies *it) {
    memset(it, 0, sizeof *it);
}

static inline void wasmgear_dependencies_end(wasmgear_dependencies *it) {
    wasmgear_job_dependencies_list_dependency_free(&it->page);
    memset(it, 0, sizeof *it);
}

/* The next dependency into `*out` (free it with wasmgear_dependency_free()): 1 when there
 * was one, 0 at the end, -1 when a page could not be read (`*error`, if not NULL, a heap
 * string saying why; free it). */
static inline int wasmgear_dependencies_next(wasmgear_dependencies *it, wasmgear_dependency *out,
                                             char **error) {
    if (error) *error = NULL;
    if (it->at == it->page.len) {
        if (it->last) return 0;
        wasmgear_job_dependencies_list_dependency_free(&it->page);
        it->page.ptr = NULL;
        it->page.len = 0;
        it->at = 0;
        uint32_t start = it->next;
        wasmgear__string_t err = {NULL, 0};
        if (!wasmgear_job_dependencies_page(start, WASMGEAR__DEPENDENCY_PAGE, &it->page, &err)) {
            if (error) *error = wasmgear__cstr(&err);
            wasmgear__string_free(&err);
            it->last = true;
            return -1;
        }
        it->last = it->page.len < WASMGEAR__DEPENDENCY_PAGE;
        if (it->page.len == 0) return 0;
    }
    const wasmgear_job_dependencies_dependency_t *d = &it->page.ptr[it->at];
    out->position = it->next;
    out->id = wasmgear__cstr(&d->id);
    out->function = wasmgear__cstr(&d->function);
    out->state = (wasmgear_dependency_state)d->state;
    out->output_size = d->output_size;
    out->error = d->error.is_some ? wasmgear__cstr(&d->error.val) : NULL;
    it->at++;
    it->next++;
    return 1;
}

/* The whole output of dependency `d`, read a piece at a time, as a NUL-terminated heap block
 * the caller must free() (`*len` its length without the NUL); NULL when it cannot be read
 * (it has not succeeded, or it was forgotten), `*error` (if not NULL) a heap string saying
 * why. */
static inline char *wasmgear_dependency_output(const wasmgear_dependency *d, size_t *len,
                                               char **error) {
    wasmgear_buf out = {0};
    if (error) *error = NULL;
    for (;;) {
        job_list_u8_t piece = {NULL, 0};
        wasmgear__string_t err = {NULL, 0};
        if (!wasmgear_job_dependencies_output(d->position, out.len, WASMGEAR__OUTPUT_PIECE, &piece,
                                              &err)) {
            if (error) *error = wasmgear__cstr(&err);
            wasmgear__string_free(&err);
            wasmgear_buf_free(&out);
            *len = 0;
            return NULL;
        }
        size_t got = piece.len;
        if (got) wasmgear_buf_append(&out, piece.ptr, got);
        job_list_u8_free(&piece);
        if (got == 0) break;
    }
    wasmgear_buf_putc(&out, '\0');
    *len = out.len - 1;
    return (char *)out.data;
}

/* Runs one job through `handler` and fills in the export's result (see the ownership
 * notes at the top). */
static inline bool wasmgear__run(wasmgear_handler handler,
                                 exports_wasmgear_job_handler_job_info_t *info,
                                 job_list_u8_t *input, job_list_u8_t *ret,
                                 exports_wasmgear_job_handler_job_error_t *err) {
    static const uint8_t empty[1] = {0};
    char *id = wasmgear__cstr(&info->id);
    char *function = wasmgear__cstr(&info->function);
    wasmgear_job job = {id, function, info->attempt, info->max_attempts,
                        info->enqueued_at_ms, info->timeout_ms};
    /* The host's strings are ours: free them (only when non-empty, as the bindings do). */
    exports_wasmgear_job_handler_job_info_free(info);

    /* An empty list's pointer is not dereferenceable: hand the handler a real one. */
    wasmgear_result r = handler(&job, input->len ? input->ptr : empty, input->len);

    job_list_u8_free(input); /* ours too; the handler must not have kept it */
    free(id);
    free(function);

    return wasmgear__settle(r, ret, err);
}

/* Makes `handler` (a wasmgear_handler) this component's job handler: write
 * `WASMGEAR_JOB(handler)` once, at file scope, in one .c file of the plugin. */
#define WASMGEAR_JOB(handler)                                                               \
    bool exports_wasmgear_job_handler_run(exports_wasmgear_job_handler_job_info_t *info,   \
                                          job_list_u8_t *input, job_list_u8_t *ret,        \
                                          exports_wasmgear_job_handler_job_error_t *err) { \
        return wasmgear__run((handler), info, input, ret, err);                            \
    }

#include "wasmgear_checkpoint.h"

#endif /* WASMGEAR__BATCH */

#ifdef __cplusplus
}
#endif

#endif /* WASMGEAR_H */
