//! Function names and their indexes, process-wide (index 0 is the root's empty name). Names are
//! only added, so an index names the same function for the life of the process.

use crate::fork::ForkSafeMutex as Mutex;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Default)]
struct Names {
    list: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
}

static NAMES: Mutex<Option<Names>> = Mutex::new(None);
/// [`NAMES`], for the atfork handlers, which hold it across fork (its holders wait for no other
/// lock).
pub(crate) static NAMES_LOCK: &dyn crate::fork::HeldAcrossFork = &NAMES;

fn with<R>(f: impl FnOnce(&mut Names) -> R) -> R {
    let mut guard = NAMES.lock();
    let names = guard.get_or_insert_with(|| {
        let root: Arc<str> = Arc::from("");
        Names { list: vec![Arc::clone(&root)], index: HashMap::from([(root, 0)]) }
    });
    f(names)
}

/// The index of `name`, registering it the first time.
pub fn intern(name: &str) -> u32 {
    with(|n| {
        if let Some(&i) = n.index.get(name) {
            return i;
        }
        let i = n.list.len() as u32;
        let name: Arc<str> = Arc::from(name);
        n.list.push(Arc::clone(&name));
        n.index.insert(name, i);
        i
    })
}

/// Every name so far, by index.
pub fn snapshot() -> Vec<Arc<str>> {
    with(|n| n.list.clone())
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_interned_once() {
        let a = super::intern("names-test-a");
        let b = super::intern("names-test-b");
        assert_ne!(a, b);
        assert_eq!(super::intern("names-test-a"), a);
        assert_eq!(&*super::snapshot()[a as usize], "names-test-a");
        assert_eq!(super::intern(""), 0);
    }
}
