//! Gibbons & Korach's condition on the zones: no two forward zones overlap, and no
//! backward zone lies inside a forward zone. O(n log n): the forward zones sorted by
//! start, neighbours compared, and for each backward zone a binary search for the one
//! forward zone that could hold it.
//!
//! Why this suffices: a forward zone's cluster occupies at least its whole zone, and the
//! register holds one value at a time, so two forward zones cannot share time. A
//! backward zone's cluster takes effect at one moment of its zone; forward zones are
//! disjoint (and their ends are distinct events), so unless one forward zone covers the
//! whole backward zone, a moment outside every forward zone is left for it. Zone ends
//! are distinct history positions (or the ends of time), so the comparisons are strict.

use super::clusters::Zone;

/// Two zones that cannot both be respected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clash {
    /// Two forward zones that overlap; `first` starts first.
    Overlap { first: Zone, second: Zone },
    /// A backward zone inside a forward zone.
    Inside { backward: Zone, forward: Zone },
}

/// The clash that shows the zones cannot be respected, if any: the first overlap of
/// forward zones in time, else the backward zone inside a forward zone that ends first.
pub(crate) fn find_clash(zones: Vec<Zone>) -> Option<Clash> {
    let (mut forward, backward): (Vec<Zone>, Vec<Zone>) =
        zones.into_iter().partition(Zone::forward);
    forward.sort_unstable_by_key(|zone| zone.bounds());
    for pair in forward.windows(2) {
        let (first, second) = (pair[0], pair[1]);
        if second.bounds().0 < first.bounds().1 {
            return Some(Clash::Overlap { first, second });
        }
    }
    backward
        .into_iter()
        .filter_map(|zone| {
            let (from, to) = zone.bounds();
            // The forward zone that starts last before this one starts: the only one
            // that could hold it, as they are disjoint.
            let before = forward.partition_point(|f| f.bounds().0 < from);
            let holder = forward.get(before.checked_sub(1)?)?;
            (to < holder.bounds().1).then_some((zone, *holder))
        })
        .min_by_key(|(backward, _)| backward.bounds().1)
        .map(|(backward, forward)| Clash::Inside { backward, forward })
}

#[cfg(test)]
mod tests {
    use super::super::clusters::Event;
    use super::*;

    /// A zone from `completion` to `invocation` (op ids are the times).
    fn zone(value: u32, completion: u64, invocation: u64) -> Zone {
        Zone {
            value,
            completion: Event {
                time: completion,
                op: completion as u32,
            },
            invocation: Event {
                time: invocation,
                op: invocation as u32,
            },
        }
    }

    #[test]
    fn disjoint_forward_zones_and_a_backward_zone_across_two_pass() {
        // Forward [1, 5] and [6, 10]; backward [4, 7] reaches the gap between them.
        let zones = vec![zone(1, 6, 10), zone(2, 1, 5), zone(3, 7, 4)];
        assert_eq!(find_clash(zones), None);
    }

    #[test]
    fn overlapping_forward_zones_clash_in_start_order() {
        let zones = vec![zone(1, 4, 10), zone(2, 1, 5), zone(3, 20, 30)];
        assert_eq!(
            find_clash(zones),
            Some(Clash::Overlap {
                first: zone(2, 1, 5),
                second: zone(1, 4, 10),
            })
        );
    }

    #[test]
    fn a_backward_zone_inside_a_forward_one_clashes_the_earliest_first() {
        let zones = vec![
            zone(1, 1, 20),
            zone(2, 9, 8),
            zone(3, 5, 3),
            zone(4, 25, 21),
            zone(5, 23, 22),
        ];
        assert_eq!(
            find_clash(zones),
            Some(Clash::Inside {
                backward: zone(3, 5, 3),
                forward: zone(1, 1, 20),
            })
        );
        // Partly outside, on either side: no clash.
        assert_eq!(find_clash(vec![zone(1, 5, 10), zone(2, 6, 4)]), None);
        assert_eq!(find_clash(vec![zone(1, 5, 10), zone(2, 11, 9)]), None);
    }
}
