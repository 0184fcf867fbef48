/* `resume-c`: `resume` in C, the checkpoints example. Runs `N` steps, saving the position after
 * each one (`wasmgear_resume_each`), and on its first attempt fails on purpose once it has done
 * half of them (`N / 2`, with a retry); the next attempt resumes from the last position saved.
 * The output says where the attempt that succeeded resumed from: `resumed from K` (`resumed
 * from 5` for `N = 10`; `resumed from 0` when it ran through at once).
 *
 * Input is UTF-8 text, `"N"` or `"N MS"`: `MS` milliseconds of work per step (none when left
 * out). Input of another shape fails the job for good with a message that quotes it. */

#include <time.h>

#include "job.h"
#include "wasmgear.h"

/* The byte length of the white space character (Unicode White_Space, what Rust's
 * `str::split_whitespace` splits at) at s[0..len), or 0 when there is none. */
static size_t white_space(const uint8_t *s, size_t len) {
    static const uint32_t others[] = {0x85,   0xA0,   0x1680, 0x2028, 0x2029,
                                      0x202F, 0x205F, 0x3000};
    if (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r')) return 1;
    size_t n = wasmgear_utf8_seq(s, len);
    if (n < 2) return 0;
    uint32_t c = n == 2 ? (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F)
                        : (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    if (n == 4) return 0;
    if (c >= 0x2000 && c <= 0x200A) return n;
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (c == others[i]) return n;
    return 0;
}

/* The next word of s[0..len) from *at: its start in *word and length in *word_len, *at moved
 * past it; false when only white space is left. */
static bool next_word(const uint8_t *s, size_t len, size_t *at, const uint8_t **word,
                      size_t *word_len) {
    size_t n;
    while (*at < len && (n = white_space(s + *at, len - *at)) > 0) *at += n;
    if (*at == len) return false;
    size_t start = *at;
    while (*at < len && white_space(s + *at, len - *at) == 0) (*at)++;
    *word = s + start;
    *word_len = *at - start;
    return true;
}

/* w[0..len) as an unsigned number no larger than `max` (digits, with an optional `+`). */
static bool unsigned_number(const uint8_t *w, size_t len, uint64_t max, uint64_t *out) {
    size_t i = len > 0 && w[0] == '+' ? 1 : 0;
    if (i == len) return false;
    uint64_t n = 0;
    for (; i < len; i++) {
        if (w[i] < '0' || w[i] > '9') return false;
        uint64_t digit = (uint64_t)(w[i] - '0');
        if (n > (max - digit) / 10) return false;
        n = n * 10 + digit;
    }
    *out = n;
    return true;
}

/* What a job does: its steps, the work per step, and where its first attempt fails. */
typedef struct {
    size_t steps;
    uint64_t pause_ms;
    bool first_attempt;
} plan;

static wasmgear_result step(size_t position, void *context) {
    const plan *p = (const plan *)context;
    if (p->first_attempt && position == p->steps / 2)
        return wasmgear_retry("failing on purpose after %zu of %zu steps (first attempt)", position,
                              p->steps);
    if (p->pause_ms > 0) {
        struct timespec pause = {(time_t)(p->pause_ms / 1000), (long)(p->pause_ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
    wasmgear_progress(position + 1, p->steps, NULL);
    return wasmgear_ok_empty();
}

static wasmgear_result resume(const wasmgear_job *job, const uint8_t *input, size_t len) {
    size_t valid = wasmgear_utf8_valid_up_to(input, len);
    if (valid != len)
        return wasmgear_fail("input is not valid UTF-8 text: invalid byte at %zu (the input has %zu bytes)",
                             valid, len);
    const uint8_t *word;
    size_t word_len, at = 0, words = 0;
    uint64_t numbers[2];
    bool ok = true;
    while (ok && next_word(input, len, &at, &word, &word_len)) {
        ok = words < 2 && unsigned_number(word, word_len, words == 0 ? SIZE_MAX : UINT64_MAX,
                                          &numbers[words]);
        words++;
    }
    if (!ok || words == 0) {
        wasmgear_buf message = {0};
        wasmgear_buf_puts(&message, "resume expects \"N\" or \"N MS\" (steps, then milliseconds of "
                                    "work per step), got ");
        wasmgear_buf_quote(&message, input, len);
        wasmgear_result r = wasmgear_fail("%.*s", (int)message.len, (const char *)message.data);
        wasmgear_buf_free(&message);
        return r;
    }
    plan p = {(size_t)numbers[0], words == 2 ? numbers[1] : 0, job->attempt == 1};
    size_t from;
    wasmgear_result r = wasmgear_resume_each(p.steps, 1, step, &p, &from);
    if (r.status != WASMGEAR_OK) return r;
    wasmgear_result_free(&r);
    wasmgear_log_info("attempt %u resumed from step %zu of %zu", (unsigned)job->attempt, from,
                      p.steps);
    wasmgear_buf out = {0};
    wasmgear_buf_printf(&out, "resumed from %zu", from);
    return wasmgear_ok_buf(&out);
}

WASMGEAR_JOB(resume)
