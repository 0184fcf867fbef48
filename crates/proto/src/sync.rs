//! Small shared helpers for state behind a lock and for the random parts of ids.
//!
//! [`Locked`]: a lock whose holder panicked is taken all the same. Every critical section
//! in wasmgear leaves its state whole (counters, maps updated in one step), so a panic in
//! one job's thread must not take every later lock of the worker down with it.
//!
//! [`random_hex`]: random hex digits from the OS's entropy source, for tokens, call ids and
//! sessions that must not collide; without an entropy source, the clock, the process id
//! and a call counter still make each call's digits distinct.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locking that takes a lock whose holder panicked all the same.
pub trait Locked<T> {
    /// Locks, ignoring poison.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Read and write locking of an `RwLock` that ignores poison, as [`Locked`] does.
pub trait RwLocked<T> {
    /// Locks for reading.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// Locks for writing.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLocked<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `2 * bytes` random hex digits.
pub fn random_hex(bytes: usize) -> String {
    let mut random = vec![0u8; bytes];
    if getrandom::fill(&mut random).is_err() {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut state = nanos
            ^ u64::from(std::process::id()).rotate_left(32)
            ^ CALLS.fetch_add(1, Ordering::Relaxed).rotate_left(48);
        for chunk in random.chunks_mut(8) {
            // splitmix64: each step's output differs for each distinct state.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
    }
    random.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_hex_has_two_digits_a_byte_and_differs() {
        let a = random_hex(8);
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, random_hex(8));
        assert_eq!(random_hex(3).len(), 6);
    }

    #[test]
    fn a_poisoned_lock_is_taken_all_the_same() {
        let lock = std::sync::Arc::new(Mutex::new(1));
        let held = lock.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(lock.is_poisoned());
        *lock.locked() += 1;
        assert_eq!(*lock.locked(), 2);
        let rw = RwLock::new(5);
        *rw.write_locked() += 1;
        assert_eq!(*rw.read_locked(), 6);
    }
}
