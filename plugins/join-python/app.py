"""`join-python`: `join` in Python. Its output is its dependencies' outputs, in the order of its
`after` list, one per line; a dependency that did not succeed fails the job for good, naming it.
"""

import wasmgear
from wasmgear import Fail, log


@wasmgear.job
def join(job, input: bytes) -> bytes:
    outputs = []
    for dependency in wasmgear.dependencies():
        if dependency.state != "succeeded":
            raise Fail(f"dependency {dependency.id} is {dependency.state}: {dependency.error or 'no output'}")
        outputs.append(dependency.output())
    log.info(f"joined the outputs of {len(outputs)} dependencies")
    return b"\n".join(outputs)
