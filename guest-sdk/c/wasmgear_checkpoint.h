/*
 * wasmgear_checkpoint.h: checkpoints for wasmgear.h, which includes it for a one-job plugin
 * (include wasmgear.h, not this). A long job saves where it got to, and its next attempt (a
 * retry after a failure, a reclaim after its worker died or lost the lease, a `wasmgear retry`
 * of the failed job) resumes from there instead of starting again. A job that succeeds drops
 * its checkpoint.
 *
 * wasmgear_checkpoint_save is cheap and never blocks: the worker writes the latest checkpoint
 * out at most every 50 ms, and always the last one before the attempt's result. A checkpoint
 * is at most the size the plugin's manifest allows (`[limits] checkpoint`, 1 MiB by default):
 * save where the job got to, not its data. wasmgear_resume_each covers the common case, a job
 * that works through a list of items.
 */
#ifndef WASMGEAR_CHECKPOINT_H
#define WASMGEAR_CHECKPOINT_H

/* The checkpoint to resume from: the last one this attempt saved, else the last one an
 * earlier attempt of the job saved that reached the queue. Returns 1 with `*data` a heap
 * block the caller must free() (NUL-terminated, `*len` its length without the NUL), 0 on a
 * fresh start (`*data` NULL), or -1 when it could not be read (the queue unreachable: worth a
 * retry), `*error` (if not NULL) a heap string saying why (free it too). */
static inline int wasmgear_checkpoint_load(uint8_t **data, size_t *len, char **error) {
    job_option_list_u8_t saved = {false, {NULL, 0}};
    job_string_t err = {NULL, 0};
    *data = NULL;
    *len = 0;
    if (error) *error = NULL;
    if (!wasmgear_job_checkpoint_load(&saved, &err)) {
        if (error) *error = wasmgear__cstr(&err);
        job_string_free(&err);
        return -1;
    }
    if (!saved.is_some) return 0;
    wasmgear_buf copy = {0};
    wasmgear_buf_append(&copy, saved.val.ptr, saved.val.len);
    wasmgear_buf_putc(&copy, '\0');
    *data = copy.data;
    *len = saved.val.len;
    job_list_u8_free(&saved.val);
    return 1;
}

/* Saves data[0..len) as the job's checkpoint, in place of the one before. Returns true, or
 * false when it was refused, saving nothing (larger than the manifest allows, or a job from
 * another protocol's queue, which keeps no checkpoints: the job should fail), `*error` (if
 * not NULL) a heap string saying why (free it). */
static inline bool wasmgear_checkpoint_save(const void *data, size_t len, char **error) {
    job_list_u8_t bytes = {(uint8_t *)data, len}; /* borrowed: the import only reads it */
    job_string_t err = {NULL, 0};
    if (error) *error = NULL;
    if (wasmgear_job_checkpoint_save(&bytes, &err)) return true;
    if (error) *error = wasmgear__cstr(&err);
    job_string_free(&err);
    return false;
}

/* One step of wasmgear_resume_each: does the item at `position` (from 0) and returns
 * wasmgear_ok_empty(), or the error that ends the job's attempt. `context` is the pointer
 * given to wasmgear_resume_each. */
typedef wasmgear_result (*wasmgear_step_fn)(size_t position, void *context);

/* Saves position `done` as decimal text; a refusal is the job's failure (in *r). */
static inline bool wasmgear__save_position(size_t done, wasmgear_result *r) {
    char text[24];
    int n = snprintf(text, sizeof text, "%zu", done);
    char *error;
    if (wasmgear_checkpoint_save(text, (size_t)n, &error)) return true;
    *r = wasmgear_fail("%s", error);
    free(error);
    return false;
}

/* The position a checkpoint of wasmgear_resume_each holds (decimal digits, an optional `+`,
 * no larger than SIZE_MAX), or false. */
static inline bool wasmgear__position(const uint8_t *s, size_t len, size_t *out) {
    size_t i = len > 0 && s[0] == '+' ? 1 : 0, n = 0;
    if (i == len) return false;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        size_t digit = (size_t)(s[i] - '0');
        if (n > (SIZE_MAX - digit) / 10) return false;
        n = n * 10 + digit;
    }
    *out = n;
    return true;
}

/* Runs `step` for each position from 0 to `count` (exclusive), from where the job's last
 * attempt got to, and saves the position reached (the number of items done, as decimal
 * text) after every `every` items and after the last. Before each item it checks whether
 * the job was asked to stop (wasmgear_cancelled()): then it saves the position and returns
 * a retry, so that the next attempt goes on from there.
 *
 * Returns wasmgear_ok_empty() with `*from` the position it resumed from (0 on a fresh
 * start), or the error to return from the handler: `step`'s own, a retry when the checkpoint
 * could not be read or the job was asked to stop, a fail when one could not be saved or the
 * job's checkpoint is not a position this saved. The items from the last saved position on
 * run again after a failure, so `step` should not mind doing one twice. */
static inline wasmgear_result wasmgear_resume_each(size_t count, size_t every, wasmgear_step_fn step,
                                                   void *context, size_t *from) {
    uint8_t *saved;
    size_t saved_len;
    char *error;
    wasmgear_result r = wasmgear_ok_empty();
    *from = 0;
    int found = wasmgear_checkpoint_load(&saved, &saved_len, &error);
    if (found < 0) {
        r = wasmgear_retry("%s", error);
        free(error);
        return r;
    }
    if (found > 0 && !wasmgear__position(saved, saved_len, from)) {
        wasmgear_buf message = {0};
        wasmgear_buf_quote(&message, saved, saved_len < 64 ? saved_len : 64);
        r = wasmgear_fail("the job's checkpoint is not a position wasmgear_resume_each saved: %.*s",
                          (int)message.len, (const char *)message.data);
        wasmgear_buf_free(&message);
    }
    free(saved);
    if (r.status != WASMGEAR_OK) return r;
    if (every == 0) every = 1;
    size_t done = *from;
    for (; done < count; done++) {
        if (wasmgear_cancelled()) {
            if (!wasmgear__save_position(done, &r)) return r;
            return wasmgear_retry("asked to stop after %zu items; the next attempt resumes there", done);
        }
        r = step(done, context);
        if (r.status != WASMGEAR_OK) return r;
        wasmgear_result_free(&r);
        if ((done + 1 - *from) % every == 0 && !wasmgear__save_position(done + 1, &r)) return r;
    }
    if ((done - *from) % every != 0 && !wasmgear__save_position(done, &r)) return r;
    return wasmgear_ok_empty();
}

#endif /* WASMGEAR_CHECKPOINT_H */
