/* `split-c`: `split` in C. Every line of the input is a chunk, enqueued as a child job of
 * `reverse`; the output is the children's outputs, one per line, in the chunks' order.
 *
 * Needs the grant: `[jobs] enqueue = ["reverse"]` in its manifest. */

#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "wasmgear.h"

#define MAX_CHUNKS 1000

static wasmgear_result split(const wasmgear_job *job, const uint8_t *input, size_t len) {
    (void)job;
    char *ids[MAX_CHUNKS];
    size_t count = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && input[i] != '\n') continue;
        if (count == MAX_CHUNKS) return wasmgear_fail("more than %d lines", MAX_CHUNKS);
        char *error = NULL;
        ids[count] = wasmgear_enqueue("reverse", input + start, i - start, NULL, &error);
        if (!ids[count]) {
            wasmgear_result r = wasmgear_fail("%s", error);
            free(error);
            return r;
        }
        count++;
        start = i + 1;
    }
    wasmgear_log_info("enqueued %zu children of reverse", count);
    wasmgear_buf out = {0};
    for (size_t i = 0; i < count; i++) {
        char *data;
        size_t n;
        wasmgear_child_state state = wasmgear_wait(ids[i], 60000, &data, &n);
        if (state != WASMGEAR_CHILD_SUCCEEDED) {
            wasmgear_result r = wasmgear_fail("child %s did not succeed: %s", ids[i], data ? data : "cancelled");
            free(data);
            wasmgear_buf_free(&out);
            return r;
        }
        if (i > 0) wasmgear_buf_putc(&out, '\n');
        wasmgear_buf_append(&out, data, n);
        free(data);
        free(ids[i]);
    }
    return wasmgear_ok_buf(&out);
}

WASMGEAR_JOB(split)
