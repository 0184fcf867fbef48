"""Encrypted jobs on a client with keys (the Rust client's crates/client/src/opening.rs): the
inputs it writes are sealed, each bound to the number reserved for its job; what it reads of
a sealed job (its output, error messages, log, input, checkpoint) is opened, each as the part
of that job it was sealed as. A client without keys is never handed a sealed text as text:
its sealed error messages and log lines say they are sealed (`said_sealed`); the bytes it
reads (output, input, checkpoint) are the envelopes as stored (`wasmgear.crypto.sealed_with`
says which key sealed one). `client_keys` reads a client's options for them."""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from ..crypto import MAX_HEADER, TEXT_PREFIX, KeyRing, no_keys_here, overhead
from ..errors import BadInput
from ..models import FlowStatus, Job
from .base import Gen, Protocol, parse_job_id
from .calls import call
from .options import JobSpec

#: What stands for the front of the oldest attempt's encrypted log, cut by the log's size
#: limit (its first line is not a whole envelope).
CUT = "[the start of this attempt's encrypted log was cut]\n"


def _number(spec: JobSpec) -> Optional[int]:
    """The number a job is placed at (a flow's or a batch's, reserved), if any."""
    for name, value in spec.named:
        if name == "number":
            return int(value)
    return None


def sealed(proto: Protocol, keys: KeyRing, function: str,
           chunk: Sequence[JobSpec]) -> Gen[List[JobSpec]]:
    """`chunk` (jobs of `function`) with each input sealed for its job (`FUNCTION:NUMBER`):
    a job placed at a number (a flow's, a batch's) with that one, the others with numbers
    reserved now (`reserve`, one call for them all), each then given as its `number`."""
    numbers = [_number(spec) for spec in chunk]
    unnumbered = numbers.count(None)
    following = 0
    if unnumbered:
        following = int((yield from call(proto.fcall("reserve", function, unnumbered))))
    out: List[JobSpec] = []
    for spec, number in zip(chunk, numbers):
        named = spec.named
        if number is None:
            number, following = following, following + 1
            named = named + (("number", str(number)),)
        envelope = keys.seal(f"{function}:{number}", "input", spec.input)
        out.append(replace(spec, input=envelope, named=named))
    return out


def _canonical(job_id: str) -> str:
    """A job id as its envelopes are bound to it (`FUNCTION:NUMBER`, no leading zeros)."""
    function, number = parse_job_id(job_id)
    return f"{function}:{number}"


def said_sealed(text: str) -> str:
    """A text field as a reader without keys sees it: a sealed one says so, `<encrypted (key
    "K"); no key here ...>`; any other as it is."""
    return f"<{no_keys_here(text)}>" if text.startswith(TEXT_PREFIX) else text


def opened_job(keys: Optional[KeyRing], job: Job) -> Job:
    """`job` with its sealed parts opened: its output, its error message and its attempts'
    messages (in `record` too). Without keys its sealed messages say they are sealed
    (`said_sealed`) and a sealed output is left as it is."""
    job_id = _canonical(job.id)
    record = copy.deepcopy(job.record)
    opening: Callable[[str], str] = (
        said_sealed if keys is None else lambda message: keys.open_text(job_id, "error", message))

    def text(message: Any) -> Any:
        return opening(message) if isinstance(message, str) else message

    error = job.error
    if error is not None:
        error = replace(error, message=text(error.message))
        if isinstance(record.get("error"), dict):
            record["error"]["message"] = text(record["error"].get("message"))
    history = [replace(attempt, message=text(attempt.message)) for attempt in job.history]
    for entry in record.get("history") or []:
        if isinstance(entry, dict) and "message" in entry:
            entry["message"] = text(entry["message"])
    output = job.output
    if output is not None and keys is not None:
        output = keys.open(job_id, "output", output)
    return replace(job, output=output, error=error, history=history, record=record)


def opened_bytes(keys: Optional[KeyRing], job_id: str, field: str,
                 data: Optional[bytes]) -> Optional[bytes]:
    """Bytes of job `job_id` sealed as `field` (`input`, `checkpoint`), opened; as they are
    without keys, or when not sealed."""
    if keys is None or data is None:
        return data
    return keys.open(_canonical(job_id), field, data)


def opened_log(keys: Optional[KeyRing], job_id: str, log: str) -> str:
    """Job `job_id`'s log with each sealed attempt (a line) opened; an attempt whose start
    the log's size limit cut says so. Without keys, each sealed line says it is sealed
    (`said_sealed`, its line break kept)."""
    if TEXT_PREFIX not in log:
        return log
    job_id = _canonical(job_id)
    opened: List[str] = []
    pieces = log.split("\n")
    for i, piece in enumerate(pieces):
        line = piece if i == len(pieces) - 1 else piece + "\n"
        if not line:
            continue
        if keys is None:
            opened.append(said_sealed(piece) + "\n" if piece.startswith(TEXT_PREFIX) else line)
        elif piece.startswith(TEXT_PREFIX):
            text = keys.open_text(job_id, "log", piece)
            opened.append(text if text.endswith("\n") else text + "\n")
        elif not opened and not piece.startswith("--- attempt "):
            # The front of the oldest attempt kept, cut by the log's size limit.
            opened.append(CUT)
        else:
            opened.append(line)
    return "".join(opened)


def opened_flow(proto: Protocol, keys: Optional[KeyRing], status: FlowStatus) -> Gen[FlowStatus]:
    """Flow `status` (as `outcomes` answered it, not yet opened: opening it twice would
    take the envelope's bytes off a size twice) with each job's sealed error opened (without
    keys, said to be sealed), and with keys each sealed output's size as it opens: its head
    (MAX_HEADER bytes, read with `output`) tells the envelope's own bytes, taken off."""
    jobs = []
    for job in status.jobs:
        error, size = job.error, job.output_bytes
        if error is not None and error.startswith(TEXT_PREFIX):
            error = (said_sealed(error) if keys is None
                     else keys.open_text(_canonical(job.id), "error", error))
        if keys is not None and size > 0:
            function, number = parse_job_id(job.id)
            head = yield from call(proto.fcall("output", function, number, 0, MAX_HEADER))
            own = overhead(bytes(head)) if isinstance(head, (bytes, bytearray)) else None
            if own is not None:
                size = max(size - own, 0)
        jobs.append(replace(job, error=error, output_bytes=size))
    return replace(status, jobs=jobs)


#: The values of WASMGEAR_ENCRYPT_ALL that leave it off (as the Rust CLI reads a flag's
#: variable); any other value turns it on.
_FALSEY = ("", "0", "false", "no", "off", "n", "f")


def client_keys(key_file: Union[str, "os.PathLike[str]", None], keys: Optional[KeyRing],
                encrypt_all: Optional[bool]) -> Tuple[Optional[KeyRing], bool]:
    """The keys a client seals and opens with, and whether it seals every input, from its
    options (read before it connects): `keys`, else the key file `key_file`, else the one
    WASMGEAR_ENCRYPTION_KEY_FILE names, else none; `encrypt_all`, else
    WASMGEAR_ENCRYPT_ALL. EncryptionError for a key file that does not read; BadInput for
    both `keys` and `key_file`, or for `encrypt_all` without keys."""
    if keys is not None and key_file is not None:
        raise BadInput("give keys or key_file, not both")
    if keys is not None and not isinstance(keys, KeyRing):
        raise BadInput(f"keys {keys!r} is not a wasmgear.crypto.KeyRing")
    if keys is None:
        path = key_file if key_file is not None else os.environ.get("WASMGEAR_ENCRYPTION_KEY_FILE")
        if path:
            keys = KeyRing.load(path)
    if encrypt_all is None:
        variable = os.environ.get("WASMGEAR_ENCRYPT_ALL", "")
        encrypt_all = variable.strip().lower() not in _FALSEY
    elif not isinstance(encrypt_all, bool):
        raise BadInput(f"encrypt_all {encrypt_all!r} is neither True nor False")
    if encrypt_all and keys is None:
        raise BadInput("encrypt_all needs the keys to seal with: give key_file (or "
                       "WASMGEAR_ENCRYPTION_KEY_FILE)")
    return keys, encrypt_all
