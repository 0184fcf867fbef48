//! [`LastWords`]: says again why a test failed, after the logs its guards print while it
//! unwinds (workers', redis-servers'), so that the reason ends a long failure output rather
//! than hide in its middle (CI shows the head and the tail).

use std::cell::RefCell;
use std::sync::Once;

thread_local! {
    /// The last panic on this thread, as the panic hook printed it.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Declared first in a test (so dropped last): when the test panics, prints the panic's
/// message again once everything else has been dropped.
pub struct LastWords(());

impl LastWords {
    /// Installs (once per process) a panic hook that notes each panic's message for its
    /// thread, then calls the hook that was there before.
    pub fn new() -> Self {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                LAST_PANIC.with(|last| *last.borrow_mut() = Some(info.to_string()));
                previous(info);
            }));
        });
        LAST_PANIC.with(|last| last.borrow_mut().take());
        LastWords(())
    }
}

impl Default for LastWords {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for LastWords {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(message) = LAST_PANIC.with(|last| last.borrow_mut().take())
        {
            eprintln!("--- why the test failed (repeated after the logs above) ---\n{message}");
        }
    }
}
