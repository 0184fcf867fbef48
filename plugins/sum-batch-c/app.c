/* `sum-batch-c`: `sum-batch` in C, a batch plugin (the WIT world `batch`: bindings from
 * `wasmgear bindings c --world batch`, hence `#include "batch.h"`). Each job's input is whole
 * numbers separated by white space; its output is their sum and the size of the batch it ran
 * in: `6 (in a batch of 100)`. Empty input sums to 0.
 *
 * Each job ends on its own: a word that is not a whole number fails that job for good
 * (`"x" is not a whole number`), and an input starting with `flaky` asks for a retry on the
 * job's first attempt (the numbers after it are summed on the next). An input starting with
 * `sleep MS` sleeps that many milliseconds first, on the job's first attempt only. A job whose
 * cancellation was asked for before its turn is skipped (`wasmgear_each`).
 *
 * Its manifest (`sum-batch-c.toml` beside the component) says how many jobs a call takes:
 * `batch = { max = 100, wait = "20ms" }`. */

#include <inttypes.h>
#include <time.h>

#include "batch.h"
#include "wasmgear.h"

/* The byte length of the white space character (Unicode White_Space, what Rust's
 * `str::split_whitespace` splits at) at s[0..len), or 0 when there is none. */
static size_t white_space(const uint8_t *s, size_t len) {
    static const uint32_t others[] = {0x85,   0xA0,   0x1680, 0x2028, 0x2029,
                                      0x202F, 0x205F, 0x3000};
    if (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r')) return 1;
    size_t n = wasmgear_utf8_seq(s, len);
    if (n < 2 || n == 4) return 0;
    uint32_t c = n == 2 ? (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F)
                        : (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    if (c >= 0x2000 && c <= 0x200A) return n;
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (c == others[i]) return n;
    return 0;
}

/* A word of the input. */
typedef struct {
    const uint8_t *at;
    size_t len;
} word;

/* The next word of s[0..len) from *at into *w, *at moved past it; false when only white
 * space is left. */
static bool next_word(const uint8_t *s, size_t len, size_t *at, word *w) {
    size_t n;
    while (*at < len && (n = white_space(s + *at, len - *at)) > 0) *at += n;
    if (*at == len) return false;
    size_t start = *at;
    while (*at < len && white_space(s + *at, len - *at) == 0) (*at)++;
    w->at = s + start;
    w->len = *at - start;
    return true;
}

static bool is(const word *w, const char *text) {
    return w->len == strlen(text) && memcmp(w->at, text, w->len) == 0;
}

/* w as a whole number of 64 bits (digits, with an optional sign), as Rust's i64 parses it. */
static bool whole_number(const word *w, bool sign_allowed, int64_t *out) {
    size_t i = 0;
    bool negative = false;
    if (w->len > 0 && (w->at[0] == '+' || (sign_allowed && w->at[0] == '-'))) {
        negative = w->at[0] == '-';
        i = 1;
    }
    if (i == w->len) return false;
    int64_t n = 0;
    for (; i < w->len; i++) {
        if (w->at[i] < '0' || w->at[i] > '9') return false;
        int digit = w->at[i] - '0';
        if (__builtin_mul_overflow(n, 10, &n)) return false;
        if (negative ? __builtin_sub_overflow(n, digit, &n) : __builtin_add_overflow(n, digit, &n))
            return false;
    }
    *out = n;
    return true;
}

/* Sums one job's numbers; `context` points to the batch's size. */
static wasmgear_result add(const wasmgear_job *job, const uint8_t *input, size_t len,
                           void *context) {
    size_t size = *(const size_t *)context;
    size_t valid = wasmgear_utf8_valid_up_to(input, len);
    if (valid != len)
        return wasmgear_fail("input is not valid UTF-8 text: invalid byte at %zu (the input has %zu bytes)",
                             valid, len);
    size_t at = 0, after = 0; /* `after`: past the word looked at, before taking it */
    word w;
    if (next_word(input, len, &after, &w) && is(&w, "sleep")) {
        at = after;
        int64_t ms;
        if (!next_word(input, len, &at, &w) || !whole_number(&w, false, &ms))
            return wasmgear_fail("`sleep` takes the milliseconds to sleep");
        if (job->attempt == 1) {
            struct timespec pause = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
            nanosleep(&pause, NULL);
        }
    }
    after = at;
    if (next_word(input, len, &after, &w) && is(&w, "flaky")) {
        at = after;
        if (job->attempt == 1) return wasmgear_retry("flaky on its first attempt");
    }
    int64_t total = 0;
    while (next_word(input, len, &at, &w)) {
        int64_t n;
        if (!whole_number(&w, true, &n)) {
            wasmgear_buf message = {0};
            wasmgear_buf_quote(&message, w.at, w.len);
            wasmgear_buf_puts(&message, " is not a whole number");
            wasmgear_result r = wasmgear_fail("%.*s", (int)message.len, (const char *)message.data);
            wasmgear_buf_free(&message);
            return r;
        }
        if (__builtin_add_overflow(total, n, &total))
            return wasmgear_fail("the sum does not fit 64 bits");
    }
    wasmgear_buf out = {0};
    wasmgear_buf_printf(&out, "%" PRId64 " (in a batch of %zu)", total, size);
    return wasmgear_ok_buf(&out);
}

/* Sums each job of the batch. */
static void sum_batch(const wasmgear_batch_job *jobs, size_t count, wasmgear_result *results) {
    wasmgear_each(jobs, count, results, add, &count);
}

WASMGEAR_BATCH(sum_batch)
