//! echo-zig: a wasmgear job handler written straight against the component model's canonical
//! ABI of the world `job` in wit/job.wit (package `wasmgear:job@0.1.0`), with no bindings
//! generator. docs/other-languages.md explains every name, signature and offset used here.
//!
//! Behaviour: reports progress (1, 1, "echoed"), logs "echo-zig: N bytes" at level info and
//! returns the input unchanged. Input `fail` returns job-error fail("asked to fail"), input
//! `retry` returns job-error retry("asked to retry").
//!
//! Build: ./build.sh [OUT_DIR] (Zig from PyPI `ziglang`, then `wasmgear componentize`).
//! Written for Zig 0.17; the only std APIs used are std.heap.wasm_allocator (through the raw
//! Allocator calls) and std.mem.Alignment.

const std = @import("std");

// ---------------------------------------------------------------------------------------------
// Imports: core module name = "<package>/<interface>@<version>", field name = the function.
// On wasm32 every u32, enum, bool, pointer and length is an i32; every u64 is an i64.
// ---------------------------------------------------------------------------------------------

const progress = struct {
    /// report: func(done: u64, total: u64, message: option<string>)
    /// -> (i64 done, i64 total, i32 is_some, i32 ptr, i32 len) -> ()
    extern "wasmgear:job/progress@0.1.0" fn report(done: u64, total: u64, is_some: u32, ptr: [*]const u8, len: usize) void;
};

const log = struct {
    /// enum level, in WIT order.
    const trace: u32 = 0;
    const debug: u32 = 1;
    const info: u32 = 2;
    const warn: u32 = 3;
    const @"error": u32 = 4;

    /// write: func(level: level, message: string) -> (i32 level, i32 ptr, i32 len) -> ()
    extern "wasmgear:job/log@0.1.0" fn write(level: u32, ptr: [*]const u8, len: usize) void;
};

// The world's two other imports, for reference (unused here, so the linker drops them and the
// component does not import them; a component may import less than its world):
//   cancel.cancelled: func() -> bool            -> () -> i32 (0 or 1)
//     extern "wasmgear:job/cancel@0.1.0" fn cancelled() u32;
//   config.get: func(key: string) -> option<string>
//     -> (i32 key_ptr, i32 key_len, i32 ret_area) -> (); the host writes, at ret_area (align 4):
//        +0 u8 is_some, +4 u32 ptr, +8 u32 len; the string was allocated with our cabi_realloc
//        and is ours to free.
//     extern "wasmgear:job/config@0.1.0" fn get(ptr: [*]const u8, len: usize, ret: *OptionString) void;

// ---------------------------------------------------------------------------------------------
// Memory: the host allocates every string and list it passes us (the job's id and function,
// the input, config values) by calling our cabi_realloc; they are then ours to free.
// ---------------------------------------------------------------------------------------------

const heap = std.heap.wasm_allocator;

/// cabi_realloc(old_ptr, old_size, align, new_size) -> new_ptr, as the canonical ABI calls it.
export fn cabi_realloc(old_ptr: ?[*]u8, old_size: usize, alignment: usize, new_size: usize) [*]u8 {
    const a = std.mem.Alignment.fromByteUnits(alignment);
    if (new_size == 0) {
        if (old_size != 0) heap.rawFree(old_ptr.?[0..old_size], a, 0);
        return @ptrFromInt(alignment); // a non-null, aligned pointer to nothing
    }
    if (old_size == 0) return heap.rawAlloc(new_size, a, 0) orelse @trap();
    const old = old_ptr.?[0..old_size];
    if (heap.rawRemap(old, a, new_size, 0)) |p| return p;
    const p = heap.rawAlloc(new_size, a, 0) orelse @trap();
    const n = @min(old_size, new_size);
    @memcpy(p[0..n], old[0..n]);
    heap.rawFree(old, a, 0);
    return p;
}

/// The string or list<u8> at (ptr, len). Pointers stay plain integers until here: an empty
/// list may come with any pointer value, 0 included.
fn bytes(ptr: usize, len: usize) []const u8 {
    if (len == 0) return &.{};
    return @as([*]const u8, @ptrFromInt(ptr))[0..len];
}

/// Frees a string or list<u8> the host handed us (allocated with alignment 1).
fn freeBytes(b: []const u8) void {
    if (b.len != 0) heap.rawFree(@constCast(b), .@"1", 0);
}

// ---------------------------------------------------------------------------------------------
// Export: handler.run: func(job: job-info, input: list<u8>) -> result<list<u8>, job-error>
// Parameters flatten to 10 core values (<= 16, so they are passed directly):
//   job.id (ptr, len), job.function (ptr, len), job.attempt i32, job.max-attempts i32,
//   job.enqueued-at-ms i64, job.timeout-ms i64, input (ptr, len).
// The result flattens to 4 values (> 1), so run returns a pointer to a return area we own.
// ---------------------------------------------------------------------------------------------

/// The memory layout of result<list<u8>, job-error>: size 16, align 4.
const RunResult = extern struct {
    /// 0 = ok, 1 = err
    tag: u8,
    payload: extern union {
        ok: extern struct { ptr: u32, len: u32 },
        err: extern struct {
            /// job-error case: 0 = retry, 1 = fail
            case: u8,
            ptr: u32,
            len: u32,
        },
    },
};

comptime {
    std.debug.assert(@sizeOf(RunResult) == 16 and @alignOf(RunResult) == 4);
    std.debug.assert(@offsetOf(RunResult, "payload") == 4);
}

var ret_area: RunResult = undefined;

fn ok(output: []const u8) *RunResult {
    ret_area.tag = 0;
    ret_area.payload = .{ .ok = .{ .ptr = @intFromPtr(output.ptr), .len = output.len } };
    return &ret_area;
}

const retry_case: u8 = 0;
const fail_case: u8 = 1;

fn err(case: u8, message: []const u8) *RunResult {
    ret_area.tag = 1;
    ret_area.payload = .{ .err = .{ .case = case, .ptr = @intFromPtr(message.ptr), .len = message.len } };
    return &ret_area;
}

fn run(
    id_ptr: usize,
    id_len: usize,
    function_ptr: usize,
    function_len: usize,
    attempt: u32,
    max_attempts: u32,
    enqueued_at_ms: u64,
    timeout_ms: u64,
    input_ptr: usize,
    input_len: usize,
) callconv(.c) *RunResult {
    _ = .{ attempt, max_attempts, enqueued_at_ms, timeout_ms };
    // This handler needs neither the id nor the function name: free them now.
    freeBytes(bytes(id_ptr, id_len));
    freeBytes(bytes(function_ptr, function_len));

    const input = bytes(input_ptr, input_len);
    if (std.mem.eql(u8, input, "fail")) {
        freeBytes(input);
        return err(fail_case, "asked to fail"); // static: post-return must not free it
    }
    if (std.mem.eql(u8, input, "retry")) {
        freeBytes(input);
        return err(retry_case, "asked to retry");
    }

    const message = "echoed";
    progress.report(1, 1, 1, message.ptr, message.len);

    var buf: [48]u8 = undefined;
    const line = std.fmt.bufPrint(&buf, "echo-zig: {d} bytes", .{input_len}) catch unreachable;
    log.write(log.info, line.ptr, line.len);

    // The output is the input buffer itself: it stays alive until post-return frees it.
    return ok(input);
}

/// cabi_post_<export>: called by the host with run's return value once it has copied the
/// result out; frees what run left alive for it (the output; the error strings are static).
fn postRun(result: *RunResult) callconv(.c) void {
    if (result.tag == 0) freeBytes(bytes(result.payload.ok.ptr, result.payload.ok.len));
}

comptime {
    @export(&run, .{ .name = "wasmgear:job/handler@0.1.0#run" });
    @export(&postRun, .{ .name = "cabi_post_wasmgear:job/handler@0.1.0#run" });
}
