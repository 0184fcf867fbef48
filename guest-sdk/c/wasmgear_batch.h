/*
 * wasmgear_batch.h: batch plugins for wasmgear.h, which includes it when the bindings are the
 * `batch` world's (`#include "batch.h"`, made by `wasmgear bindings c --world batch gen/`);
 * include wasmgear.h, not this.
 *
 * A batch plugin exports `wasmgear:job/batch-handler` instead of the one-job `handler`: the
 * worker gives it up to its manifest's `batch.max` jobs of its function in one fresh instance
 * and one call (`batch = { max = 100, wait = "20ms" }` in `NAME.toml`). Each job succeeds,
 * fails or asks for a retry on its own, with its own output, attempts and history. The limits
 * (timeout, memory) hold for the whole call; jobs of one batch share its memory while it runs.
 *
 *     static void shout(const wasmgear_batch_job *jobs, size_t count, wasmgear_result *results) {
 *         for (size_t i = 0; i < count; i++) results[i] = wasmgear_ok(jobs[i].input, jobs[i].len);
 *     }
 *
 *     WASMGEAR_BATCH(shout)
 *
 * wasmgear_each runs a one-job function over the batch, skipping (as cancelled) the jobs whose
 * cancellation was asked for before their turn.
 */
#ifndef WASMGEAR_BATCH_H
#define WASMGEAR_BATCH_H

/* One job of a batch (valid during the call): what a one-job handler would be given, and its
 * place in the batch. */
typedef struct wasmgear_batch_job {
    wasmgear_job job;     /* the job */
    const uint8_t *input; /* its input, byte for byte as the client enqueued it */
    size_t len;           /* the input's length */
    uint32_t index;       /* its place in the batch, from 0 */
} wasmgear_batch_job;

/* Whether `job` has been asked to stop (a client cancelled it, or its lease was lost) while
 * the batch runs: give it an error and go on with the others (the worker records it as
 * cancelled). wasmgear_cancelled() says whether the whole batch is to stop. */
static inline bool wasmgear_batch_job_cancelled(const wasmgear_batch_job *job) {
    return wasmgear_job_batch_jobs_cancelled(job->index);
}

/* A batch handler: fills results[i] with the result of jobs[i] (as a one-job handler returns
 * it) for each of the `count` jobs. A result left unset fails its job. */
typedef void (*wasmgear_batch_handler)(const wasmgear_batch_job *jobs, size_t count,
                                       wasmgear_result *results);

/* A function wasmgear_each runs for one job of a batch: a one-job handler with the `context`
 * given to wasmgear_each (the batch's size, a connection the jobs share...). */
typedef wasmgear_result (*wasmgear_each_fn)(const wasmgear_job *job, const uint8_t *input,
                                            size_t len, void *context);

/* Runs `fn` over each of the `count` jobs in turn and puts its result in results[i]. A job
 * whose cancellation was asked for before its turn is not run: its result is an error saying
 * so. */
static inline void wasmgear_each(const wasmgear_batch_job *jobs, size_t count,
                                 wasmgear_result *results, wasmgear_each_fn fn, void *context) {
    for (size_t i = 0; i < count; i++) {
        if (wasmgear_batch_job_cancelled(&jobs[i]))
            results[i] = wasmgear_fail("cancelled before its turn in the batch");
        else
            results[i] = fn(&jobs[i].job, jobs[i].input, jobs[i].len, context);
    }
}

/* A status no result has: the mark of one the batch handler left unset. */
#define WASMGEAR__UNSET ((wasmgear_status)-1)

/* Runs a batch through `handler` and fills in the export's results, one per job, in order
 * (see the ownership notes at the top of wasmgear.h). */
static inline void wasmgear__run_batch(wasmgear_batch_handler handler,
                                       exports_wasmgear_job_batch_handler_list_batch_job_t *wit,
                                       exports_wasmgear_job_batch_handler_list_result_list_u8_job_error_t *ret) {
    static const uint8_t empty[1] = {0};
    size_t count = wit->len;
    wasmgear_batch_job *jobs = (wasmgear_batch_job *)wasmgear__alloc(count * sizeof *jobs);
    wasmgear_result *results = (wasmgear_result *)wasmgear__alloc(count * sizeof *results);
    for (size_t i = 0; i < count; i++) {
        const exports_wasmgear_job_batch_handler_batch_job_t *j = &wit->ptr[i];
        wasmgear_job job = {wasmgear__cstr(&j->job.id), wasmgear__cstr(&j->job.function),
                            j->job.attempt,             j->job.max_attempts,
                            j->job.enqueued_at_ms,      j->job.timeout_ms};
        jobs[i].job = job;
        /* An empty list's pointer is not dereferenceable: hand the handler a real one. */
        jobs[i].input = j->input.len ? j->input.ptr : empty;
        jobs[i].len = j->input.len;
        jobs[i].index = (uint32_t)i;
        results[i].status = WASMGEAR__UNSET;
        results[i].data = NULL;
        results[i].len = 0;
    }

    handler(jobs, count, results);

    ret->len = count;
    ret->ptr = (exports_wasmgear_job_batch_handler_result_list_u8_job_error_t *)wasmgear__alloc(
        count * sizeof *ret->ptr);
    for (size_t i = 0; i < count; i++) {
        free((char *)jobs[i].job.id);
        free((char *)jobs[i].job.function);
        if (results[i].status == WASMGEAR__UNSET)
            results[i] = wasmgear_fail("the batch handler gave job %zu of the batch no result", i);
        ret->ptr[i].is_err = !wasmgear__settle(results[i], &ret->ptr[i].val.ok, &ret->ptr[i].val.err);
    }
    /* The host's jobs (strings, inputs, the list) are ours: the handler must not have kept
     * them. */
    exports_wasmgear_job_batch_handler_list_batch_job_free(wit);
    free(results);
    free(jobs);
}

/* Makes `handler` (a wasmgear_batch_handler) this component's batch handler: write
 * `WASMGEAR_BATCH(handler)` once, at file scope, in one .c file of the plugin. */
#define WASMGEAR_BATCH(handler)                                                              \
    void exports_wasmgear_job_batch_handler_run_batch(                                       \
        exports_wasmgear_job_batch_handler_list_batch_job_t *jobs,                           \
        exports_wasmgear_job_batch_handler_list_result_list_u8_job_error_t *ret) {           \
        wasmgear__run_batch((handler), jobs, ret);                                           \
    }

#endif /* WASMGEAR_BATCH_H */
