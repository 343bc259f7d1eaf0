//! Emptied lists kept to be filled again: once a run is under way, the hot paths take their lists
//! (an event's fragments, a super-fragment's, an event's parts) from here rather than allocating
//! them (issue #37).

/// Emptied lists of `T`, at most a bound of them.
#[derive(Debug, Clone)]
pub struct Spare<T> {
    lists: Vec<Vec<T>>,
    bound: usize,
}

impl<T> Spare<T> {
    /// Keeps at most `bound` lists.
    pub fn new(bound: usize) -> Self {
        Spare { lists: Vec::new(), bound }
    }

    /// An empty list: a kept one, or a new one (which allocates as it grows).
    pub fn take(&mut self) -> Vec<T> {
        self.lists.pop().unwrap_or_default()
    }

    /// Keeps `list`, emptied, unless the bound is reached or it has no memory to reuse.
    pub fn keep(&mut self, mut list: Vec<T>) {
        if self.lists.len() < self.bound && list.capacity() > 0 {
            list.clear();
            self.lists.push(list);
        }
    }
}

/// Keeps nothing: every list taken is a new one.
impl<T> Default for Spare<T> {
    fn default() -> Self {
        Spare::new(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_kept_comes_back_empty_with_its_memory_and_no_more_than_the_bound_are_kept() {
        let mut spare = Spare::new(1);
        spare.keep(vec![1, 2, 3]);
        spare.keep(vec![4]);
        let list = spare.take();
        assert!(list.is_empty() && list.capacity() >= 3);
        assert_eq!(spare.take().capacity(), 0, "the second list was over the bound");
    }
}
