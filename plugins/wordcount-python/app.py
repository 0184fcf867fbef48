"""`wordcount-python`: counts the words, lines and characters of a text.

Input is JSON `{"text": "..."}`. The text is processed in chunks of 1000 characters (Unicode
code points), reporting progress `(i, n, "chunk i/n")` after each and checking for
cancellation before each. The output is compact JSON
`{"words":W,"lines":L,"chars":C,"top":[["word",count],...]}`: words are maximal runs of
characters other than space, \\t, \\n, \\r, \\x0b and \\x0c; lines counts '\\n'; chars counts
code points; top holds the 3 most frequent words (ASCII-lowercased), by count descending, then
word ascending. `wordcount-js` computes exactly the same bytes.

Input that is not a JSON object with a string "text" fails the job for good; `"fail_retry":
true` makes it ask for a retry instead (to test error classes), and `"chunk_delay_ms": N`
makes it wait N ms before each chunk (a long job to cancel in tests).
"""

import re
import time

import wasmgear
from wasmgear import Fail, Retry, cancelled, log, progress

CHUNK = 1000
TOP = 3
WHITESPACE = " \t\n\r\x0b\x0c"
WORD = re.compile("[^ \t\n\r\x0b\x0c]+")
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
              int: "a number", float: "a number", type(None): "null"}


def parse(input):
    """The text to count, from the job's input bytes; raises Fail or Retry."""
    request = wasmgear.json_input(input)
    if not isinstance(request, dict):
        raise Fail(
            'wordcount expects a JSON object {"text": "..."}, '
            f"got {JSON_TYPES.get(type(request), 'something else')}"
        )
    if request.get("fail_retry") is True:
        raise Retry("asked to retry")
    if "text" not in request:
        raise Fail('wordcount expects a JSON object {"text": "..."}: "text" is missing')
    text = request["text"]
    if not isinstance(text, str):
        raise Fail(f'"text" must be a string, got {JSON_TYPES.get(type(text), "something else")}')
    delay = request.get("chunk_delay_ms")
    if not isinstance(delay, int) or isinstance(delay, bool):
        delay = 0
    return text, delay


def count(text, delay=0):
    """Counts `text` chunk by chunk, checking for cancellation before each chunk and
    reporting progress after each; returns the output object."""
    counts = {}
    words = 0

    def add(word):
        nonlocal words
        words += 1
        key = word.translate(ASCII_LOWER)
        counts[key] = counts.get(key, 0) + 1

    total = (len(text) + CHUNK - 1) // CHUNK
    carry = []  # the pieces of a word that runs on into the next chunk
    for i in range(total):
        if delay > 0:
            time.sleep(delay / 1000)
        if cancelled():
            raise Fail(f"cancelled after {i} of {total} chunks")
        chunk = text[i * CHUNK:(i + 1) * CHUNK]
        tokens = WORD.findall(chunk)
        if len(tokens) == 1 and len(tokens[0]) == len(chunk):
            carry.append(chunk)  # no whitespace at all: the word goes on
        else:
            if carry:
                if chunk[0] in WHITESPACE:
                    add("".join(carry))
                else:
                    tokens[0] = "".join(carry) + tokens[0]
                carry = []
            if tokens and chunk[-1] not in WHITESPACE:
                carry = [tokens.pop()]
            for token in tokens:
                add(token)
        progress(i + 1, total, f"chunk {i + 1}/{total}")
    if carry:
        add("".join(carry))

    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    return {
        "words": words,
        "lines": text.count("\n"),
        "chars": len(text),
        "top": [[word, n] for word, n in top],
    }


@wasmgear.job
def wordcount(job, input):
    text, delay = parse(input)
    log.info(f"counting {len(text)} characters")
    return wasmgear.json_output(count(text, delay))
