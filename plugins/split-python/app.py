"""`split-python`: `split` in Python. Every line of the input is a chunk, enqueued as a child
job of the function `child` names (the manifest's `[config]`, default `reverse`); the output is
the children's outputs, one per line, in the chunks' order.

Needs the grant: `[jobs] enqueue = ["reverse"]` in its manifest.
"""

import wasmgear
from wasmgear import Fail, log


@wasmgear.job
def split(job, input: bytes) -> str:
    child = wasmgear.config("child") or "reverse"
    chunks = wasmgear.text_input(input).split("\n")
    ids = [wasmgear.enqueue(child, chunk) for chunk in chunks]
    log.info(f"enqueued {len(ids)} children of {child}")
    outputs = []
    for id in ids:
        outcome = wasmgear.wait(id, 60000)
        if outcome.state != "succeeded":
            raise Fail(f"child {id} {outcome.state}: {outcome.message}")
        outputs.append(outcome.output.decode("utf-8"))
    return "\n".join(outputs)
