/* `join-c`: `join` in C. Its output is its dependencies' outputs, in the order of its `after`
 * list, one per line; a dependency that did not succeed fails the job for good, naming it. */

#include <stdlib.h>

#include "job.h"
#include "wasmgear.h"

static wasmgear_result join(const wasmgear_job *job, const uint8_t *input, size_t len) {
    (void)job;
    (void)input;
    (void)len;
    wasmgear_buf out = {0};
    wasmgear_dependencies walk;
    wasmgear_dependencies_begin(&walk);
    wasmgear_dependency d;
    char *error = NULL;
    size_t count = 0;
    int got;
    while ((got = wasmgear_dependencies_next(&walk, &d, &error)) == 1) {
        size_t n = 0;
        char *data = d.state == WASMGEAR_DEPENDENCY_SUCCEEDED ? wasmgear_dependency_output(&d, &n, &error)
                                                              : NULL;
        if (!data) {
            wasmgear_result r = wasmgear_fail("dependency %s has no output: %s", d.id,
                                              error ? error : (d.error ? d.error : "it did not succeed"));
            free(error);
            wasmgear_dependency_free(&d);
            wasmgear_dependencies_end(&walk);
            wasmgear_buf_free(&out);
            return r;
        }
        if (count > 0) wasmgear_buf_putc(&out, '\n');
        wasmgear_buf_append(&out, data, n);
        free(data);
        wasmgear_dependency_free(&d);
        count++;
    }
    wasmgear_dependencies_end(&walk);
    if (got < 0) {
        wasmgear_result r = wasmgear_retry("cannot read the dependencies: %s", error);
        free(error);
        wasmgear_buf_free(&out);
        return r;
    }
    wasmgear_log_info("joined the outputs of %zu dependencies", count);
    return wasmgear_ok_buf(&out);
}

WASMGEAR_JOB(join)
