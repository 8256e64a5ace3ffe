//! Committed epochs kept for a time (`StoreConfig::retain_history`)
//! beyond the newest few manifests the store holds in memory, so that a
//! changefeed can resume `AS OF` any of them.
//!
//! Such an epoch's manifest stays in the store but not in memory: the
//! history holds only its epoch and commit time, and the objects that no
//! newer manifest names, filed under the newest epoch that names each.
//! An object drops out of the manifests for good once a newer manifest
//! stops naming it (a merged delta, a replaced base, a delivered sink
//! slice), so it can go as soon as that epoch leaves the history.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, SystemTime};

/// Epochs older than the retained manifests that are still kept, oldest
/// first, and the objects only they name.
#[derive(Debug, Default)]
pub(crate) struct History {
    /// Each kept epoch and when it was committed, oldest first.
    epochs: VecDeque<(u64, SystemTime)>,
    /// Objects that only kept epochs name, by the newest epoch naming
    /// them, oldest first.
    objects: VecDeque<(u64, Vec<String>)>,
}

/// What leaves the history: manifests and objects to delete.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Expired {
    /// Epochs whose manifests go.
    pub epochs: Vec<u64>,
    /// Objects no kept manifest names any more.
    pub objects: Vec<String>,
}

impl History {
    /// Keeps `epoch` (committed at `at`), the oldest retained manifest
    /// until now, with `objects`: those it names and no newer manifest
    /// does. Epochs come oldest first.
    pub(crate) fn keep(&mut self, epoch: u64, at: SystemTime, objects: Vec<String>) {
        self.epochs.push_back((epoch, at));
        if !objects.is_empty() {
            self.objects.push_back((epoch, objects));
        }
    }

    /// Keeps `epoch` as older than every epoch kept so far: recovery reads
    /// the kept manifests newest first.
    pub(crate) fn keep_older(&mut self, epoch: u64, at: SystemTime, objects: Vec<String>) {
        self.epochs.push_front((epoch, at));
        if !objects.is_empty() {
            self.objects.push_front((epoch, objects));
        }
    }

    /// Lets go of every epoch committed more than `window` before `now`
    /// and of the objects only those named.
    pub(crate) fn expire(&mut self, now: SystemTime, window: Duration) -> Expired {
        let mut expired = Expired::default();
        while let Some(&(epoch, at)) = self.epochs.front() {
            if within(window, at, now) {
                break;
            }
            self.epochs.pop_front();
            expired.epochs.push(epoch);
            while self.objects.front().is_some_and(|(e, _)| *e <= epoch) {
                expired
                    .objects
                    .extend(self.objects.pop_front().map(|(_, o)| o).unwrap_or_default());
            }
        }
        expired
    }

    /// Every object a kept epoch names and no retained manifest does.
    pub(crate) fn objects(&self) -> impl Iterator<Item = &str> {
        self.objects
            .iter()
            .flat_map(|(_, o)| o.iter().map(String::as_str))
    }

    /// The oldest kept epoch and its commit time.
    pub(crate) fn oldest(&self) -> Option<(u64, SystemTime)> {
        self.epochs.front().copied()
    }

    /// How many epochs are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.epochs.len()
    }
}

/// Whether an epoch committed at `at` is still within `window` of `now`.
/// Without a window none is (also when the clock stepped back); a window
/// too long to add to a time never passes.
pub(crate) fn within(window: Duration, at: SystemTime, now: SystemTime) -> bool {
    !window.is_zero() && at.checked_add(window).is_none_or(|until| until > now)
}

/// The distinct objects of `paths` that are not in `named`.
pub(crate) fn not_named<'a>(
    paths: impl Iterator<Item = &'a str>,
    named: &HashSet<String>,
) -> Vec<String> {
    let distinct: HashSet<&str> = paths.filter(|p| !named.contains(*p)).collect();
    let mut objects: Vec<String> = distinct.into_iter().map(str::to_owned).collect();
    objects.sort_unstable();
    objects
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn an_object_goes_with_the_newest_epoch_that_named_it() {
        let mut history = History::default();
        history.keep(1, at(100), vec!["a".into()]);
        history.keep(2, at(110), vec![]);
        history.keep(3, at(120), vec!["b".into(), "c".into()]);
        assert_eq!(history.len(), 3);
        let window = Duration::from_secs(30);
        // Nothing is 30 s old yet.
        assert_eq!(history.expire(at(129), window), Expired::default());
        assert_eq!(
            history.expire(at(140), window),
            Expired {
                epochs: vec![1, 2],
                objects: vec!["a".into()],
            }
        );
        assert_eq!(history.oldest(), Some((3, at(120))));
        assert_eq!(history.objects().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(
            history.expire(at(150), window),
            Expired {
                epochs: vec![3],
                objects: vec!["b".into(), "c".into()],
            }
        );
        assert_eq!(history.len(), 0);
    }

    #[test]
    fn recovery_files_older_epochs_first() {
        let mut history = History::default();
        history.keep_older(5, at(50), vec!["x".into()]);
        history.keep_older(4, at(40), vec!["w".into()]);
        assert_eq!(history.oldest(), Some((4, at(40))));
        let expired = history.expire(at(45), Duration::from_secs(5));
        assert_eq!(expired.epochs, [4]);
        assert_eq!(expired.objects, ["w"]);
    }

    #[test]
    fn not_named_keeps_each_object_once() {
        let named: HashSet<String> = ["b".to_owned()].into();
        let paths = ["a", "b", "a", "c"];
        assert_eq!(not_named(paths.into_iter(), &named), ["a", "c"]);
    }
}
