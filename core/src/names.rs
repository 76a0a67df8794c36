//! Closed sets of values that users spell by name: each value's names are
//! defined once, and every parser, usage text and message reads them here.

use crate::text::{one_of, quote};
use std::fmt;

/// A value with one name (and maybe other accepted spellings), out of a
/// fixed list.
pub trait Named: Copy + 'static {
    /// Every value, in the order usage texts list them.
    const ALL: &'static [Self];

    /// The name usage texts and messages give it.
    fn name(self) -> &'static str;

    /// Other spellings accepted for the same value.
    fn aliases(self) -> &'static [&'static str] {
        &[]
    }
}

/// Names the values of a fieldless enum, `Variant => "name" | "alias"`:
/// implements [`Named`] and `FromStr` through the names. `named!(from_str
/// T)` implements `FromStr` alone, for a `T` that implements [`Named`] by
/// hand.
macro_rules! named {
    ($ty:ident { $($variant:ident => $name:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $crate::names::Named for $ty {
            const ALL: &'static [Self] = &[$($ty::$variant),+];

            fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }

            fn aliases(self) -> &'static [&'static str] {
                match self {
                    $($ty::$variant => &[$($alias),*]),+
                }
            }
        }

        $crate::names::named!(from_str $ty);
    };
    (from_str $ty:ident) => {
        impl std::str::FromStr for $ty {
            type Err = $crate::names::UnknownName;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                $crate::names::parse_name(text)
            }
        }
    };
}

/// A const table of `$outer` values: every value of `$inner`'s own list
/// (`Named::ALL`), each wrapped in `$wrap`, with `$extra` first or last:
/// a type that adds one value to another's names (a method or `none`; a
/// vendor or `auto`) lists them from the other's table, never by hand.
macro_rules! with_one_more {
    ($table:ident: $outer:ty = $extra:expr, first, $wrap:path, $inner:ty) => {
        $crate::names::with_one_more!(@ $table: $outer = $extra, 1, $wrap, $inner);
    };
    ($table:ident: $outer:ty = $extra:expr, last, $wrap:path, $inner:ty) => {
        $crate::names::with_one_more!(@ $table: $outer = $extra, 0, $wrap, $inner);
    };
    (@ $table:ident: $outer:ty = $extra:expr, $from:literal, $wrap:path, $inner:ty) => {
        const $table: [$outer; <$inner as $crate::names::Named>::ALL.len() + 1] = {
            let inner = <$inner as $crate::names::Named>::ALL;
            let mut all = [$extra; <$inner as $crate::names::Named>::ALL.len() + 1];
            let mut i = 0;
            while i < inner.len() {
                // Evaluated by the compiler: an index out of range fails
                // the build.
                #[allow(clippy::indexing_slicing)]
                {
                    all[i + $from] = $wrap(inner[i]);
                }
                i += 1;
            }
            all
        };
    };
}

pub(crate) use named;
pub(crate) use with_one_more;

/// The value `text` names, by its name or an alias.
pub fn parse_name<T: Named>(text: &str) -> Result<T, UnknownName> {
    T::ALL
        .iter()
        .copied()
        .find(|v| v.name() == text || v.aliases().contains(&text))
        .ok_or_else(|| UnknownName {
            value: text.to_string(),
            valid: names::<T>(),
        })
}

/// Every value's name, aliases left out.
pub fn names<T: Named>() -> Vec<&'static str> {
    T::ALL.iter().map(|v| v.name()).collect()
}

/// `a, b (or b-alias)`: every name, each followed by its aliases.
pub(crate) fn with_aliases<T: Named>() -> String {
    let shown: Vec<String> = T::ALL
        .iter()
        .map(|v| match v.aliases() {
            [] => v.name().to_string(),
            aliases => format!("{} (or {})", v.name(), aliases.join(", ")),
        })
        .collect();
    shown.join(", ")
}

/// A name that is none of the values'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    pub(crate) value: String,
    pub(crate) valid: Vec<&'static str>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is not {}", quote(&self.value), one_of(&self.valid))
    }
}

impl std::error::Error for UnknownName {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Colour {
        Red,
        Grey,
    }

    named!(Colour {
        Red => "red",
        Grey => "grey" | "gray",
    });

    #[test]
    fn names_aliases_and_lists() {
        assert_eq!(parse_name("red"), Ok(Colour::Red));
        assert_eq!("gray".parse(), Ok(Colour::Grey));
        let err = parse_name::<Colour>("blue").unwrap_err();
        assert_eq!(err.to_string(), "\"blue\" is not red or grey");
        assert_eq!(names::<Colour>(), ["red", "grey"]);
        assert_eq!(with_aliases::<Colour>(), "red, grey (or gray)");
        assert_eq!(one_of(&["a", "b", "c"]), "a, b or c");
        assert_eq!(one_of(&["a"]), "a");
        assert_eq!(one_of(&[]), "");
    }
}
