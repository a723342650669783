//! Delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing
//! Input", TSE 2002): the smallest subset of a failing input's parts that still fails,
//! found by testing chunks of the current set and their complements at ever finer
//! granularity. The result is 1-minimal: removing any single part makes the failure
//! go away (when the search ran to its end).
//!
//! The search is a plain state machine: [`Ddmin::propose`] proposes a candidate (the indices
//! of the parts to keep, ascending) and [`Ddmin::report`] takes whether it still fails.
//! It knows nothing of time or of how a candidate is tried; the caller tries each
//! candidate however it likes (a real cluster, several plays) and stops whenever its
//! budget is spent, keeping [`Ddmin::best`], which always fails.

use std::collections::BTreeSet;

/// A candidate: the parts it keeps, and whether it is a chunk (else a complement).
#[derive(Debug, Clone)]
struct Candidate {
    parts: Vec<usize>,
    chunk: bool,
}

/// The search over the parts `0..n` of an input known to fail.
#[derive(Debug, Clone)]
pub struct Ddmin {
    /// The smallest set found to fail so far (ascending indices).
    current: Vec<usize>,
    /// Into how many chunks `current` is cut.
    granularity: usize,
    /// The candidates of this granularity not yet proposed, last first.
    pending: Vec<Candidate>,
    /// The candidate proposed and not yet reported.
    proposed: Option<Candidate>,
    /// Every candidate already judged (each is proposed at most once).
    tried: BTreeSet<Vec<usize>>,
    done: bool,
}

impl Ddmin {
    /// A search over `n` parts; all of them together fail.
    pub fn new(n: usize) -> Ddmin {
        let mut search = Ddmin {
            current: (0..n).collect(),
            granularity: 2,
            pending: Vec::new(),
            proposed: None,
            tried: BTreeSet::new(),
            done: n == 0,
        };
        search.tried.insert(search.current.clone());
        search.plan();
        search
    }

    /// The next candidate to try, or `None` when the search is over (or a candidate is
    /// awaiting its report).
    pub fn propose(&mut self) -> Option<Vec<usize>> {
        if self.proposed.is_some() {
            return None;
        }
        loop {
            if self.done {
                return None;
            }
            if let Some(candidate) = self.pending.pop() {
                if self.tried.insert(candidate.parts.clone()) {
                    let parts = candidate.parts.clone();
                    self.proposed = Some(candidate);
                    return Some(parts);
                }
                continue;
            }
            self.refine();
        }
    }

    /// Whether the candidate last proposed still fails. A report without a proposal is
    /// ignored.
    pub fn report(&mut self, fails: bool) {
        let Some(candidate) = self.proposed.take() else {
            return;
        };
        if !fails {
            return;
        }
        // A chunk that fails: go on from it, coarsely again. A complement that fails:
        // go on from it, one chunk fewer.
        self.current = candidate.parts;
        self.granularity = if candidate.chunk {
            2
        } else {
            (self.granularity - 1).max(2)
        };
        self.plan();
    }

    /// The smallest set known to fail.
    pub fn best(&self) -> &[usize] {
        &self.current
    }

    /// Whether the search ran to its end (`best` is then 1-minimal).
    pub fn is_done(&self) -> bool {
        self.done && self.proposed.is_none()
    }

    /// No candidate of this granularity failed: finer, or the end.
    fn refine(&mut self) {
        if self.granularity >= self.current.len() {
            self.done = true;
        } else {
            self.granularity = (self.granularity * 2).min(self.current.len());
            self.plan();
        }
    }

    /// The candidates of the current granularity: each chunk, then (with more than two
    /// chunks; with two they are the chunks) each chunk's complement.
    fn plan(&mut self) {
        if self.current.len() <= 1 {
            // One part cannot be split; the empty set is not a candidate (the failure
            // needs something to happen).
            self.pending.clear();
            self.done = true;
            return;
        }
        self.granularity = self.granularity.min(self.current.len());
        let chunks = self.chunks();
        let mut candidates: Vec<Candidate> = chunks
            .iter()
            .map(|parts| Candidate {
                parts: parts.clone(),
                chunk: true,
            })
            .collect();
        if self.granularity > 2 {
            for chunk in &chunks {
                let complement: Vec<usize> = self
                    .current
                    .iter()
                    .copied()
                    .filter(|part| !chunk.contains(part))
                    .collect();
                candidates.push(Candidate {
                    parts: complement,
                    chunk: false,
                });
            }
        }
        // `next` pops from the back: reverse, so that they are proposed in order.
        candidates.reverse();
        self.pending = candidates;
    }

    /// `current` cut into `granularity` chunks of (nearly) equal size.
    fn chunks(&self) -> Vec<Vec<usize>> {
        let len = self.current.len();
        let n = self.granularity.clamp(1, len.max(1));
        (0..n)
            .map(|i| self.current[i * len / n..(i + 1) * len / n].to_vec())
            .filter(|chunk| !chunk.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search to its end (or `budget` tests) against `fails`; the best set and
    /// the number of tests.
    fn search(n: usize, budget: usize, fails: impl Fn(&[usize]) -> bool) -> (Vec<usize>, usize) {
        let mut ddmin = Ddmin::new(n);
        let mut tests = 0;
        while tests < budget {
            let Some(candidate) = ddmin.propose() else {
                break;
            };
            tests += 1;
            ddmin.report(fails(&candidate));
        }
        (ddmin.best().to_vec(), tests)
    }

    fn contains_all(needed: &'static [usize]) -> impl Fn(&[usize]) -> bool {
        move |set: &[usize]| needed.iter().all(|part| set.contains(part))
    }

    #[test]
    fn finds_the_one_part_that_matters() {
        for needed in 0..16 {
            let (best, _) = search(16, usize::MAX, |set| set.contains(&needed));
            assert_eq!(best, vec![needed]);
        }
    }

    #[test]
    fn finds_a_pair_split_across_chunks() {
        let (best, tests) = search(16, usize::MAX, contains_all(&[3, 12]));
        assert_eq!(best, vec![3, 12]);
        // Far fewer tests than the 2^16 subsets.
        assert!(tests < 60, "{tests} tests");
    }

    #[test]
    fn finds_a_scattered_triple_of_a_long_input() {
        let (best, _) = search(100, usize::MAX, contains_all(&[0, 57, 99]));
        assert_eq!(best, vec![0, 57, 99]);
    }

    #[test]
    fn its_result_is_one_minimal_for_a_non_monotone_predicate() {
        // Fails when it holds an even number (≥ 2) of the parts 2, 5, 9, 11: several
        // minimal sets, and supersets that pass.
        let fails = |set: &[usize]| {
            let n = [2, 5, 9, 11].iter().filter(|p| set.contains(p)).count();
            n >= 2 && n % 2 == 0
        };
        let (best, _) = search(12, usize::MAX, fails);
        assert!(fails(&best));
        for drop in 0..best.len() {
            let mut smaller = best.clone();
            smaller.remove(drop);
            assert!(!fails(&smaller), "{best:?} is not 1-minimal");
        }
        assert_eq!(best.len(), 2);
    }

    #[test]
    fn stops_at_its_budget_with_a_failing_best() {
        let fails = contains_all(&[1, 6, 13, 14]);
        for budget in 0..12 {
            let (best, tests) = search(16, budget, &fails);
            assert!(tests <= budget);
            assert!(fails(&best), "budget {budget}: {best:?} does not fail");
        }
    }

    #[test]
    fn never_proposes_a_candidate_twice_nor_the_whole_input() {
        let mut ddmin = Ddmin::new(10);
        let mut seen = BTreeSet::new();
        while let Some(candidate) = ddmin.propose() {
            assert_ne!(candidate.len(), 10);
            assert!(!candidate.is_empty());
            assert!(seen.insert(candidate.clone()), "{candidate:?} twice");
            ddmin.report(candidate.contains(&4) && candidate.contains(&7));
        }
        assert!(ddmin.is_done());
        assert_eq!(ddmin.best(), &[4, 7]);
    }

    #[test]
    fn an_input_that_needs_everything_stays_whole() {
        let (best, _) = search(5, usize::MAX, |set| set.len() == 5);
        assert_eq!(best, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn one_or_no_part_is_already_minimal() {
        assert_eq!(Ddmin::new(1).propose(), None);
        assert_eq!(Ddmin::new(0).propose(), None);
        assert!(Ddmin::new(0).is_done());
    }

    #[test]
    fn a_second_proposal_waits_for_the_first_report() {
        let mut ddmin = Ddmin::new(4);
        assert!(ddmin.propose().is_some());
        assert_eq!(ddmin.propose(), None);
        ddmin.report(false);
        assert!(ddmin.propose().is_some());
    }
}
