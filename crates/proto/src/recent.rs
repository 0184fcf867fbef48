//! A bounded set of recently seen names (lease tokens), the oldest forgotten first: for
//! "at most once" checks that must not grow without bound.

use std::collections::{HashSet, VecDeque};

/// The last `capacity` distinct names noted.
#[derive(Debug, Clone)]
pub struct Recent {
    capacity: usize,
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl Recent {
    /// Remembers at most `capacity` names (at least one).
    pub fn new(capacity: usize) -> Self {
        Recent {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    /// Notes `name`; false when it is noted already.
    pub fn insert(&mut self, name: &str) -> bool {
        if self.set.contains(name) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
        self.order.push_back(name.to_string());
        self.set.insert(name.to_string());
        true
    }

    /// Whether `name` is noted.
    pub fn contains(&self, name: &str) -> bool {
        self.set.contains(name)
    }

    /// How many names are noted.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    /// A name is noted once; past the capacity the oldest is forgotten.
    #[test]
    fn names_are_noted_once_and_the_oldest_forgotten() {
        let mut recent = super::Recent::new(2);
        assert!(recent.insert("a"));
        assert!(!recent.insert("a"));
        assert!(recent.insert("b"));
        assert!(recent.insert("c"));
        assert_eq!(recent.len(), 2);
        assert!(!recent.contains("a"));
        assert!(recent.contains("b") && recent.contains("c"));
        assert!(recent.insert("a"));
    }
}
