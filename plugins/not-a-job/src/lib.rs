//! `not-a-job`: a valid WebAssembly component that does not implement the `wasmgear:job`
//! world (it exports no `handler`), so that the tests can check the worker refuses it with a
//! clear message instead of failing its jobs.

/// An export of the core module, so the component is not empty; not a job handler.
#[unsafe(no_mangle)]
pub extern "C" fn add(a: i32, b: i32) -> i32 {
    a.wrapping_add(b)
}
