"""`resume-python`: `resume` in Python, the checkpoints example. Runs `N` steps, saving the
position after each one (`wasmgear.resume_each`), and on its first attempt fails on purpose
once it has done half of them (`N // 2`, with a retry); the next attempt resumes from the last
position saved. The output says where the attempt that succeeded resumed from: `resumed from K`
(`resumed from 5` for `N = 10`; `resumed from 0` when it ran through at once).

Input is UTF-8 text, `"N"` or `"N MS"`: `MS` milliseconds of work per step (none when left
out). Input of another shape fails the job for good with a message that quotes it.
"""

import re
import time

import wasmgear
from wasmgear import Fail, Retry, log, progress

# What Rust's `str::split_whitespace` splits at (Unicode White_Space), and its unsigned integers.
WHITESPACE = re.compile("[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
UNSIGNED = re.compile(r"\+?[0-9]+")


@wasmgear.job
def resume(job, input: bytes) -> str:
    text = wasmgear.text_input(input)
    bad = Fail(
        'resume expects "N" or "N MS" (steps, then milliseconds of work per step), '
        f"got {wasmgear.quote(text)}"
    )
    words = [word for word in WHITESPACE.split(text) if word]
    if not 1 <= len(words) <= 2 or not all(UNSIGNED.fullmatch(word) for word in words):
        raise bad
    steps = int(words[0])
    pause = int(words[1]) / 1000 if len(words) == 2 else 0
    fail_at = steps // 2 if job.attempt == 1 else None

    def step(position, _item):
        if position == fail_at:
            raise Retry(f"failing on purpose after {position} of {steps} steps (first attempt)")
        if pause:
            time.sleep(pause)
        progress(position + 1, steps)

    start = wasmgear.resume_each(range(steps), 1, step)
    log.info(f"attempt {job.attempt} resumed from step {start} of {steps}")
    return f"resumed from {start}"
