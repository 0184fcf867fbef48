"""`sum-batch-python`: `sum-batch` in Python, a batch plugin (the WIT world `batch`, built with
`-w batch`). Each job's input is whole numbers separated by white space; its output is their
sum and the size of the batch it ran in: `6 (in a batch of 100)`. Empty input sums to 0.

Each job ends on its own: a word that is not a whole number fails that job for good
(`"x" is not a whole number`), and an input starting with `flaky` asks for a retry on the
job's first attempt (the numbers after it are summed on the next). An input starting with
`sleep MS` sleeps that many milliseconds first, on the job's first attempt only. A job whose
cancellation was asked for before its turn is skipped (`wasmgear.each`).

Its manifest (`sum-batch-python.toml` beside the component) says how many jobs a call takes:
`batch = { max = 100, wait = "20ms" }`.
"""

import re
import time

import wasmgear
from wasmgear import Fail, Retry

# What Rust's `str::split_whitespace` splits at (Unicode White_Space), and its integers.
WHITESPACE = re.compile("[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
WHOLE = re.compile(r"[+-]?[0-9]+")
UNSIGNED = re.compile(r"\+?[0-9]+")
I64 = range(-(1 << 63), 1 << 63)


def whole_number(word):
    """`word` as a 64-bit whole number; anything else fails the job for good."""
    if WHOLE.fullmatch(word) and int(word) in I64:
        return int(word)
    raise Fail(f"{wasmgear.quote(word)} is not a whole number")


def add(job, input, size):
    """Sums one job's numbers; `size` is the batch's."""
    words = [word for word in WHITESPACE.split(wasmgear.text_input(input)) if word]
    if words[:1] == ["sleep"]:
        if len(words) < 2 or not UNSIGNED.fullmatch(words[1]) or int(words[1]) >= 1 << 64:
            raise Fail("`sleep` takes the milliseconds to sleep")
        if job.attempt == 1:
            time.sleep(int(words[1]) / 1000)
        words = words[2:]
    if words[:1] == ["flaky"]:
        words = words[1:]
        if job.attempt == 1:
            raise Retry("flaky on its first attempt")
    total = 0
    for word in words:
        total += whole_number(word)
        if total not in I64:
            raise Fail("the sum does not fit 64 bits")
    return f"{total} (in a batch of {size})"


@wasmgear.batch
def sum_batch(jobs):
    """Sums each job of the batch."""
    size = len(jobs)
    return wasmgear.each(jobs, lambda job, input: add(job, input, size))
