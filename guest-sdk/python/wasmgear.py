"""Write wasmgear job handlers in Python.

A wasmgear worker runs every job in a fresh instance of a WebAssembly component. This module
turns one plain Python function into such a component (built with componentize-py against
the `resumable` world of `wit/job.wit`, which includes every one-job world before it)::

    import wasmgear
    from wasmgear import Fail, log

    @wasmgear.job
    def reverse(job, input: bytes) -> bytes:
        log.info(f"reversing {len(input)} bytes for job {job.id}")
        return input[::-1]

The decorated function gets the `Job` being run and the job's input bytes, and returns the
output: `bytes` as they are, `str` as UTF-8, `None` as empty. Raise `Retry(msg)` for a
transient failure (the queue runs the job again, with backoff, while attempts remain) and
`Fail(msg)` for a permanent one; any other exception fails the job for good with the
exception's text, and its traceback goes to the job's log.

While it runs, the handler can report `progress`, write to the worker's `log`, ask whether
it has been `cancelled`, read the settings its manifest grants (`config`), and enqueue child
jobs and wait for them (`enqueue`, `wait`, granted by the manifest), read the jobs it waited
for (`dependencies`), and save a checkpoint its next attempt resumes from
(`checkpoint_save`, `checkpoint_load`, `resume_each`). `json_input` and `json_output` read and
write JSON.

`@wasmgear.job` defines the class `Handler` in the decorated function's module: that is the
export componentize-py looks for, so build with that module as the app
(`componentize-py -d wit -w resumable componentize app -o plugin.wasm`). A batch plugin uses
`@wasmgear.batch` instead, which defines `BatchHandler`, and is built with `-w batch`. A
module may use `@wasmgear.job` or `@wasmgear.batch` only once: a component exports exactly
one handler.

The bindings of an interface that not every world has (progress, child jobs, dependencies
and checkpoints belong to one job; `batch-jobs` to a batch) are imported when the world has
them, so this module imports in both worlds; using one the world lacks raises `Fail`.

Outside a component (plain `python3`, for unit tests) the module imports as well: `progress`
and `log` write to stderr, `cancelled()` (and `BatchJob.cancelled()`) is False and `config()`
is None, and `call` runs a handler the way the worker would; child jobs, dependencies and
checkpoints need a worker and raise `Fail`.
"""

import importlib as _importlib
import itertools as _itertools
import json as _json
import re as _re
import sys as _sys
import traceback as _traceback

__all__ = [
    "Job",
    "JobError",
    "Retry",
    "Fail",
    "job",
    "call",
    "progress",
    "log",
    "cancelled",
    "config",
    "ChildOutcome",
    "enqueue",
    "wait",
    "Dependency",
    "dependencies",
    "checkpoint_load",
    "checkpoint_save",
    "resume_each",
    "quote",
    "BatchJob",
    "batch",
    "each",
    "call_batch",
    "text_input",
    "json_input",
    "json_output",
]

# Inside a component (componentize-py builds for WASI, where `sys.platform` is "wasi") the
# generated bindings must import: a failure there is a build error, not a reason to fall back.
IN_COMPONENT = _sys.platform == "wasi"

if IN_COMPONENT:
    from componentize_py_types import Err as _Err
    from componentize_py_types import Ok as _Ok
    from wit_world import exports as _exports
    from wit_world.imports import cancel as _cancel
    from wit_world.imports import config as _config
    from wit_world.imports import log as _log
    from wit_world.imports.types import JobError_Fail as _WitFail
    from wit_world.imports.types import JobError_Retry as _WitRetry


def _optional_bindings(name):
    """The bindings of interface `name` (`wit_world.imports.NAME`), or None when the world
    lacks it (a batch plugin has no progress, a one-job plugin no batch-jobs). Imported now,
    while componentize-py pre-initializes the app: the component holds only the modules
    imported by then, so one first imported when a job runs would not be found."""
    if not IN_COMPONENT:
        return None
    try:
        return _importlib.import_module(f"wit_world.imports.{name}")
    except ImportError:
        return None


# The interfaces only some worlds have: progress, child jobs, dependencies and checkpoints
# belong to one job, batch-jobs to a batch. This module imports in every world.
_progress = _optional_bindings("progress")
_jobs_bindings = _optional_bindings("jobs")
_dependencies_bindings = _optional_bindings("dependencies")
_checkpoint_bindings = _optional_bindings("checkpoint")
_batch_jobs = _optional_bindings("batch_jobs")


class JobError(Exception):
    """Why a job did not produce an output: raise `Retry` or `Fail`, not this."""

    #: Whether the queue should run the job again (while attempts remain).
    retry = False

    def __init__(self, message):
        message = str(message)
        super().__init__(message)
        self.message = message


class Retry(JobError):
    """A transient failure: the queue runs the job again later, while attempts remain."""

    retry = True


class Fail(JobError):
    """A permanent failure (bad input, a bug): the job fails for good at once."""

    retry = False


class Job:
    """What the worker tells a handler about the job it is running."""

    __slots__ = ("id", "function", "attempt", "max_attempts", "enqueued_at_ms", "timeout_ms")

    def __init__(self, id, function, attempt=1, max_attempts=1, enqueued_at_ms=0, timeout_ms=0):
        #: The job's id, unique within the queue, e.g. "resize:1042".
        self.id = id
        #: The function the job was enqueued for.
        self.function = function
        #: Which attempt this is: 1 the first time, 2 on the first retry, and so on.
        self.attempt = attempt
        #: How many attempts the job may have in all.
        self.max_attempts = max_attempts
        #: When the job was enqueued, in milliseconds since the Unix epoch (queue clock).
        self.enqueued_at_ms = enqueued_at_ms
        #: How long the handler may run, in milliseconds, before the worker stops it.
        self.timeout_ms = timeout_ms

    @property
    def is_last_attempt(self):
        """Whether a `Retry` from this attempt would still fail the job for good."""
        return self.attempt >= self.max_attempts

    @classmethod
    def _from_wit(cls, info):
        return cls(
            info.id,
            info.function,
            info.attempt,
            info.max_attempts,
            info.enqueued_at_ms,
            info.timeout_ms,
        )

    def __repr__(self):
        return (
            f"Job(id={self.id!r}, function={self.function!r}, attempt={self.attempt}, "
            f"max_attempts={self.max_attempts}, enqueued_at_ms={self.enqueued_at_ms}, "
            f"timeout_ms={self.timeout_ms})"
        )


# --- calls into the worker ----------------------------------------------------------------


def progress(done, total, message=None):
    """Reports that `done` units of `total` are finished (`total` 0: unknown), with an
    optional short message. Reports may be coalesced; the last one always arrives."""
    done, total = int(done), int(total)
    if message is not None:
        message = str(message)
    if IN_COMPONENT:
        _bindings(_progress, "progress reports", "resumable").report(done, total, message)
    else:
        suffix = f" {message}" if message is not None else ""
        print(f"[progress] {done}/{total}{suffix}", file=_sys.stderr)


class _Log:
    """Writes lines to the worker's log, tagged with the job's id: `log.info("...")`."""

    _LEVELS = ("trace", "debug", "info", "warn", "error")

    def write(self, level, message):
        """Writes `message` at `level` ("trace", "debug", "info", "warn" or "error")."""
        if level not in self._LEVELS:
            raise ValueError(f"unknown log level {level!r}")
        message = str(message)
        if IN_COMPONENT:
            _log.write(_log.Level[level.upper()], message)
        else:
            print(f"[{level}] {message}", file=_sys.stderr)

    def trace(self, message):
        self.write("trace", message)

    def debug(self, message):
        self.write("debug", message)

    def info(self, message):
        self.write("info", message)

    def warn(self, message):
        self.write("warn", message)

    warning = warn

    def error(self, message):
        self.write("error", message)

    def __call__(self, level, message):
        self.write(level, message)


#: The job's log: `log.info(msg)`, `log.debug`, `log.warn`, `log.error`, `log.trace`.
log = _Log()


def cancelled():
    """Whether the job has been asked to stop. Long handlers check it between steps and,
    once it is True, stop soon by raising (usually `Fail`)."""
    if IN_COMPONENT:
        return bool(_cancel.cancelled())
    return False


def config(key):
    """The value of configuration key `key` granted by the plugin's manifest
    (`[config]` in `NAME.toml`), or None when the manifest does not set it."""
    if IN_COMPONENT:
        return _config.get(str(key))
    return None


# --- child jobs ---------------------------------------------------------------------------


class ChildOutcome:
    """How a child job ended: `state` is "succeeded" (with `output` bytes), "failed" (with
    `message`) or "cancelled"."""

    def __init__(self, state, output=b"", message=""):
        self.state = state
        self.output = output
        self.message = message

    def __repr__(self):
        return f"ChildOutcome({self.state!r}, output={self.output!r}, message={self.message!r})"


def _bindings(bindings, what, world):
    """`bindings`, or a `Fail` saying that `what` needs a worker (outside a component) or the
    plugin built with `-w WORLD` (in a component whose world lacks them)."""
    if not IN_COMPONENT:
        raise Fail(f"{what} need a worker: this runs outside a component")
    if bindings is None:
        raise Fail(f"{what} need the plugin built with `-w {world}`")
    return bindings


def _jobs():
    """The `wasmgear:job/jobs` bindings: present in a component built against the `parent`
    world or one that includes it (`-w resumable`, as `build.sh` does)."""
    return _bindings(_jobs_bindings, "child jobs", "resumable")


def enqueue(function, input, key=None, priority=None, max_attempts=None, timeout_ms=None):
    """Enqueues a job of `function` with `input` (bytes or str) as a child of the running job
    and returns its id (`FUNCTION:N`). The plugin's manifest must grant it (`[jobs] enqueue =
    ["FUNCTION"]`, up to `max_children` per job). `key` names the child within its parent (by
    default its function and input, counted among its children alike in both): a retried
    parent gets the same child back.
    Raises `Fail` with the reason when refused."""
    jobs = _jobs()
    data = input.encode("utf-8") if isinstance(input, str) else bytes(input)
    options = jobs.ChildOptions(key, priority, max_attempts, timeout_ms)
    try:
        return jobs.enqueue(str(function), data, options)
    except _Err as e:
        raise Fail(str(e.value)) from None


def wait(id, timeout_ms=60000):
    """Waits up to `timeout_ms` for job `id` to end and returns its `ChildOutcome`; raises
    `Retry` when waiting failed (the time ran out: the job goes on)."""
    jobs = _jobs()
    try:
        outcome = jobs.wait(str(id), int(timeout_ms))
    except _Err as e:
        raise Retry(str(e.value)) from None
    if isinstance(outcome, jobs.Outcome_Succeeded):
        return ChildOutcome("succeeded", output=bytes(outcome.value))
    if isinstance(outcome, jobs.Outcome_Failed):
        return ChildOutcome("failed", message=str(outcome.value))
    return ChildOutcome("cancelled")


# --- input and output ---------------------------------------------------------------------


def text_input(data):
    """The input bytes as text; raises `Fail` when they are not UTF-8."""
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise Fail(f"input is not valid UTF-8: {e}") from None


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def json_input(data):
    """The input bytes parsed as JSON (strict: no NaN or Infinity); raises `Fail` saying
    what is wrong when they are not UTF-8 JSON."""
    text = text_input(data)
    try:
        return _json.loads(text, parse_constant=_reject_constant)
    except ValueError as e:
        raise Fail(f"input is not valid JSON: {e}") from None


_LONE_SURROGATE = _re.compile("[\ud800-\udfff]")


def json_output(value):
    """`value` as compact JSON bytes (no spaces, UTF-8, non-ASCII unescaped): the same bytes
    JavaScript's `JSON.stringify` writes for strings, integers, lists and dicts."""
    text = _json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # A lone surrogate cannot be UTF-8: escape it as JSON.stringify does.
    text = _LONE_SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text)
    return text.encode("utf-8")


def _output_bytes(value):
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise Fail(
        f"handler returned {type(value).__name__}, expected bytes, str or None "
        "(use wasmgear.json_output for JSON)"
    )


# --- the handler --------------------------------------------------------------------------


def call(handler, job, input):
    """Runs `handler(job, input)` the way the worker does and returns its output bytes.

    Raises `Retry` or `Fail`; any other exception becomes a `Fail` with its text (and its
    traceback is logged at error level)."""
    try:
        return _output_bytes(handler(job, bytes(input)))
    except JobError:
        raise
    except Exception as e:
        log.error("uncaught exception:\n" + "".join(_traceback.format_exception(e)).rstrip())
        text = str(e)
        raise Fail(f"{type(e).__name__}: {text}" if text else type(e).__name__) from e


_registered = None


def _register(handler, decorator):
    """Records `handler` as the component's one entry point, refusing a second one."""
    global _registered
    if _registered is not None:
        raise RuntimeError(
            f"wasmgear.{decorator} used after another entry point ({_registered.__qualname__} "
            f"and {handler.__qualname__}): a component exports exactly one handler"
        )
    _registered = handler


def _export(handler, cls, name):
    """Puts the export class `cls` into the module `handler` was defined in, as `name`: the
    class componentize-py looks for in the app module."""
    cls.__module__ = handler.__module__
    cls.__qualname__ = name
    module = _sys.modules.get(handler.__module__)
    if module is not None:
        setattr(module, name, cls)


def _wit_error(error):
    """A `JobError` as the WIT `job-error`."""
    return _WitRetry(error.message) if error.retry else _WitFail(error.message)


def job(handler):
    """Makes `handler(job, input: bytes) -> bytes | str | None` this component's job handler.

    Defines the class `Handler` that componentize-py exports, in the module `handler` was
    defined in, and returns `handler` unchanged (so tests can call it directly)."""
    _register(handler, "job")
    base = _exports.Handler if IN_COMPONENT else object

    class Handler(base):
        def run(self, info, input):
            try:
                return call(handler, Job._from_wit(info), input)
            except JobError as e:
                raise _Err(_wit_error(e))

    _export(handler, Handler, "Handler")
    return handler


def _dependencies():
    """The `wasmgear:job/dependencies` bindings: present in a component built against the
    `dependent` world or one that includes it (`-w resumable`, as `build.sh` does)."""
    return _bindings(_dependencies_bindings, "dependencies", "resumable")


#: How many dependencies one page holds, and how many bytes of an output one read takes.
_PAGE = 100
_PIECE = 1024 * 1024

_STATES = ("succeeded", "failed", "cancelled", "unfinished", "missing")


class Dependency:
    """One job the running job waited for (its `after` list), as `dependencies()` yields it."""

    __slots__ = ("position", "id", "function", "state", "output_size", "error")

    def __init__(self, position, id, function, state, output_size=0, error=None):
        #: Its place in the job's `after` list, from 0.
        self.position = position
        #: Its id, for example `resize:17`.
        self.id = id
        #: Its function.
        self.function = function
        #: How it stands: "succeeded", "failed", "cancelled", "unfinished" or "missing" (not
        #: kept: it never existed, or it was forgotten after its retention).
        self.state = state
        #: The size of its output in bytes: 0 unless it succeeded.
        self.output_size = output_size
        #: The message it failed or was cancelled with, or None.
        self.error = error

    def output(self):
        """Its whole output as bytes, read a piece at a time; raises `Retry` when it cannot be
        read (it has not succeeded, or it was forgotten)."""
        deps = _dependencies()
        data = bytearray()
        while True:
            try:
                piece = deps.output(self.position, len(data), _PIECE)
            except _Err as e:
                raise Retry(str(e.value)) from None
            if not piece:
                return bytes(data)
            data.extend(piece)

    def __repr__(self):
        return f"Dependency({self.position}, {self.id!r}, {self.state!r}, output_size={self.output_size})"


def dependencies():
    """Yields the running job's dependencies (`Dependency`) in the order of its `after` list,
    a page at a time, so a job with thousands of them holds only what it asks for; raises
    `Retry` when a page cannot be read."""
    deps = _dependencies()
    start = 0
    while True:
        try:
            page = deps.page(start, _PAGE)
        except _Err as e:
            raise Retry(str(e.value)) from None
        for offset, d in enumerate(page):
            state = _STATES[d.state] if isinstance(d.state, int) else d.state.name.lower()
            yield Dependency(start + offset, d.id, d.function, state, d.output_size, d.error)
        if len(page) < _PAGE:
            return
        start += len(page)


# --- checkpoints --------------------------------------------------------------------------


def _checkpoint():
    """The `wasmgear:job/checkpoint` bindings: present in a component built against the
    `resumable` world (`-w resumable`, as `build.sh` does)."""
    return _bindings(_checkpoint_bindings, "checkpoints", "resumable")


def checkpoint_load():
    """The checkpoint to resume from (bytes): the last one this attempt saved, else the last
    one an earlier attempt of the job saved that reached the queue; None on a fresh start.
    Raises `Retry` when it cannot be read (the queue unreachable)."""
    checkpoint = _checkpoint()
    try:
        saved = checkpoint.load()
    except _Err as e:
        raise Retry(str(e.value)) from None
    return None if saved is None else bytes(saved)


def checkpoint_save(data):
    """Saves `data` (bytes, or str as UTF-8) as the job's checkpoint, in place of the one
    before. Cheap and never blocks: the worker writes the latest one out at most every 50 ms
    and always the last one before the attempt's result. Raises `Fail` when refused (larger
    than the manifest's `[limits] checkpoint`, 1 MiB by default, or a job from another
    protocol's queue, which keeps no checkpoints)."""
    checkpoint = _checkpoint()
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        checkpoint.save(payload)
    except _Err as e:
        raise Fail(str(e.value)) from None


_POSITION = _re.compile(r"\+?[0-9]+")


def _position_of(saved):
    """The position a checkpoint of `resume_each` holds; another checkpoint fails the job."""
    text = saved.decode("utf-8", "replace")
    if _POSITION.fullmatch(text) and int(text) <= _sys.maxsize:
        return int(text)
    raise Fail(
        "the job's checkpoint is not a position resume_each saved: "
        + quote(saved[:64].decode("utf-8", "replace"))
    )


def resume_each(items, every, step):
    """Runs `step(position, item)` for each of `items` (any iterable), from where the job's
    last attempt got to, and saves the position reached (the number of items done, as
    decimal text) after every `every` items and after the last. Before each item it checks
    whether the job was asked to stop (`cancelled()`): then it saves the position and raises
    `Retry`, so that the next attempt goes on from there.

    Returns the position it resumed from: 0 on a fresh start. The items from the last saved
    position on run again after a failure, so `step` should not mind doing one twice."""
    saved = checkpoint_load()
    start = 0 if saved is None else _position_of(saved)
    every = max(int(every), 1)
    done = start
    for item in _itertools.islice(items, start, None):
        if cancelled():
            checkpoint_save(str(done))
            raise Retry(f"asked to stop after {done} items; the next attempt resumes there")
        step(done, item)
        done += 1
        if (done - start) % every == 0:
            checkpoint_save(str(done))
    if (done - start) % every != 0:
        checkpoint_save(str(done))
    return start


_ESCAPES = {"\0": "\\0", "\t": "\\t", "\r": "\\r", "\n": "\\n", "\\": "\\\\", '"': '\\"'}


def quote(text):
    """`text` in double quotes, with backslashes, quotes and control characters escaped as
    the Rust SDK's messages quote text (Rust's `{:?}`: `"a\\"b"`, `"\\u{1}"`), so that an error
    message reads the same from a plugin in any language. (Other Unicode is left as it is.)"""
    out = []
    for ch in str(text):
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\u{{{code:x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


# --- batch plugins ------------------------------------------------------------------------


class BatchJob:
    """One job of a batch, as a `@wasmgear.batch` handler gets it: `job` (a `Job`), `input`
    (its bytes, as the client enqueued them) and `index`, its place in the batch from 0."""

    __slots__ = ("job", "input", "index")

    def __init__(self, job, input, index):
        self.job = job
        self.input = bytes(input)
        self.index = index

    def cancelled(self):
        """Whether this job has been asked to stop (a client cancelled it, or its lease was
        lost) while the batch runs: give it an error and go on with the others (the worker
        records it as cancelled). False outside a component."""
        if not IN_COMPONENT:
            return False
        return bool(_bindings(_batch_jobs, "batch jobs", "batch").cancelled(self.index))

    def __repr__(self):
        return f"BatchJob({self.job!r}, {self.input!r}, {self.index})"


def each(jobs, handler):
    """Runs the one-job `handler(job, input: bytes)` over each of `jobs` (`BatchJob`s) in turn,
    as `call` runs it, and returns one result per job, in order: its output bytes, or the
    `Retry`/`Fail` it ended with. A job whose cancellation was asked for before its turn is
    not run: its result is a `Fail` saying so."""
    results = []
    for batch_job in jobs:
        if batch_job.cancelled():
            results.append(Fail("cancelled before its turn in the batch"))
            continue
        try:
            results.append(call(handler, batch_job.job, batch_job.input))
        except JobError as e:
            results.append(e)
    return results


def call_batch(handler, jobs):
    """Runs the batch handler `handler(jobs)` the way the worker does and returns one result
    per job: output bytes, or a `JobError` (`Retry` or `Fail`). Each output may be bytes, str
    or None, as a one-job handler's; a `Retry` or `Fail` the handler raises is every job's
    result, and any other exception fails every job (its traceback is logged)."""
    jobs = list(jobs)
    try:
        results = handler(jobs)
    except JobError as e:
        return [e] * len(jobs)
    except Exception as e:
        log.error("uncaught exception:\n" + "".join(_traceback.format_exception(e)).rstrip())
        text = str(e)
        return [Fail(f"{type(e).__name__}: {text}" if text else type(e).__name__)] * len(jobs)
    outputs = []
    for result in results:
        if isinstance(result, JobError):
            outputs.append(result)
            continue
        try:
            outputs.append(_output_bytes(result))
        except JobError as e:
            outputs.append(e)
    return outputs


def batch(handler):
    """Makes `handler(jobs: list[BatchJob]) -> list` this component's batch handler (a batch
    plugin, built with `-w batch`): it returns one result per job, in order, each the job's
    output (bytes, str or None) or a `Retry`/`Fail` instance for a job that did not succeed.
    `each(jobs, fn)` runs a one-job function over the batch. A list of another length fails
    every job of the batch.

    Defines the class `BatchHandler` that componentize-py exports, in the module `handler`
    was defined in, and returns `handler` unchanged (so tests can call it directly)."""
    _register(handler, "batch")
    base = _exports.BatchHandler if IN_COMPONENT else object

    class BatchHandler(base):
        def run_batch(self, jobs):
            batch_jobs = [
                BatchJob(Job._from_wit(wit_job.job), wit_job.input, index)
                for index, wit_job in enumerate(jobs)
            ]
            return [
                _Err(_wit_error(result)) if isinstance(result, JobError) else _Ok(result)
                for result in call_batch(handler, batch_jobs)
            ]

    _export(handler, BatchHandler, "BatchHandler")
    return handler
