//! Sorting context blocks by a key computed once per block.
//!
//! Blocks are large (a couple of hundred bytes) and a turn's blocks arrive in a few runs, each
//! in order or reversed (the history is collected newest first). A comparison sort recomputes keys at every
//! comparison and moves each block about log₂ n times; here each key is computed once, the
//! small (key, position) pairs are sorted, and only the blocks out of place move, each once
//! along its cycle of the permutation. Input already in order, or in a few runs each in order
//! or reversed, costs a few passes.

/// Sorts `items` by `key`, ties in their current order (stable).
pub(crate) fn sort_by_computed_key<T, K: Ord>(items: &mut [T], key: impl FnMut(&T) -> K) {
    let mut keyed: Vec<(K, usize)> = items.iter().map(key).zip(0..).collect();
    // Blocks come as a few runs, each in order or in reverse (the history is collected newest
    // first and sent oldest first): reversing the descending runs usually leaves the pairs in
    // order, and the sort then only checks that.
    let mut i = 0;
    while i + 1 < keyed.len() {
        if keyed[i + 1] < keyed[i] {
            let start = i;
            while i + 1 < keyed.len() && keyed[i + 1] < keyed[i] {
                i += 1;
            }
            keyed[start..=i].reverse();
        }
        i += 1;
    }
    keyed.sort_unstable();
    // Position `to` takes the item now at `from[to]`.
    let mut from: Vec<usize> = keyed.into_iter().map(|(_, at)| at).collect();
    for start in 0..from.len() {
        // Follow the cycle through `start`, marking each visited position as settled.
        let mut to = start;
        while from[to] != start {
            let next = from[to];
            items.swap(to, next);
            from[to] = to;
            to = next;
        }
        from[to] = to;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn agrees_with_a_stable_sort(mut v in proptest::collection::vec((0u8..8, any::<u16>()), 0..200)) {
            let mut expected = v.clone();
            expected.sort_by_key(|x| x.0);
            sort_by_computed_key(&mut v, |x| x.0);
            prop_assert_eq!(&v, &expected);
            v.reverse();
            let mut expected = v.clone();
            expected.sort_by_key(|x| x.0);
            sort_by_computed_key(&mut v, |x| x.0);
            prop_assert_eq!(v, expected);
        }

        #[test]
        fn nearly_sorted_input_is_sorted(n in 0usize..300, moves in proptest::collection::vec((any::<usize>(), any::<usize>()), 0..6)) {
            let mut v: Vec<usize> = (0..n).collect();
            for (a, b) in moves {
                if n > 0 {
                    v.swap(a % n, b % n);
                }
            }
            sort_by_computed_key(&mut v, |x| *x);
            prop_assert_eq!(v, (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn reverses_and_rotates() {
        let mut v: Vec<u32> = (0..50).rev().collect();
        sort_by_computed_key(&mut v, |x| *x);
        assert_eq!(v, (0..50).collect::<Vec<_>>());
        let mut r: Vec<u32> = (10..50).chain(0..10).collect();
        sort_by_computed_key(&mut r, |x| *x);
        assert_eq!(r, (0..50).collect::<Vec<_>>());
        // The shape of a layout: system blocks, the history newest first, the current message.
        let mut layout: Vec<u32> = (0..3).chain((3..40).rev()).chain(40..42).collect();
        sort_by_computed_key(&mut layout, |x| *x);
        assert_eq!(layout, (0..42).collect::<Vec<_>>());
    }
}
