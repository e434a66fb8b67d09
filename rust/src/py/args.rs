//! Argument conversion, defined once for every binding: each Python argument is taken as
//! `&Bound<PyAny>` and converted here, so a value of the wrong type raises `ArgumentTypeError`
//! (an `AffinityError` and a `TypeError`) naming the argument and the type received, and a value
//! of the right type that cannot be represented raises `InvalidArgumentError`. PyO3's own
//! extraction would raise a plain `TypeError` (or `OverflowError`, `UnicodeEncodeError`) instead.
//!
//! Every helper accepts what PyO3's extraction of the same Rust type accepts (an integer argument
//! also takes any object with `__index__`, as PyO3 does, but never a `bool`).

use std::fmt::Display;
use std::path::PathBuf;

use pyo3::conversion::FromPyObject;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::type_object::PyTypeCheck;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};

use super::errors::{invalid_argument, wrong_type};

/// The name of `value`'s type, as error messages show it.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|name| name.to_string()).unwrap_or_default()
}

/// `ArgumentTypeError("{name}: expected {expected}, got {type}")`.
pub(crate) fn expected(name: impl Display, expected: &str, value: &Bound<'_, PyAny>) -> PyErr {
    wrong_type(format!("{name}: expected {expected}, got {}", type_name(value)))
}

/// The name of an item of a sequence argument: `name[index]` (built only for an error message).
#[derive(Clone, Copy)]
pub(crate) struct Item<'a> {
    parent: &'a dyn Display,
    index: usize,
}

impl<'a> Item<'a> {
    /// Item `index` of the argument named `parent`.
    pub(crate) fn new(parent: &'a dyn Display, index: usize) -> Item<'a> {
        Item { parent, index }
    }
}

impl Display for Item<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}[{}]", self.parent, self.index)
    }
}

/// An integer argument in `min..=max`: any Python int (or object with `__index__`, but not a
/// `bool`) is taken, so no `OverflowError`; a value outside the range raises
/// `InvalidArgumentError`, another type `ArgumentTypeError`.
pub(crate) fn int_argument(name: impl Display, value: &Bound<'_, PyAny>, min: i128, max: i128) -> PyResult<i128> {
    if value.is_instance_of::<PyBool>() {
        return Err(expected(name, "an integer", value));
    }
    let index;
    let int = if value.is_instance_of::<PyInt>() {
        value
    } else {
        index = value
            .py()
            .import("operator")?
            .call_method1("index", (value,))
            .map_err(|_| expected(&name, "an integer", value))?;
        &index
    };
    match int.extract::<i128>() {
        Ok(number) if (min..=max).contains(&number) => Ok(number),
        _ => Err(invalid_argument(format!("{name}={int}: must be between {min} and {max}"))),
    }
}

/// An integer argument of type `T` in `min..=max` (see [`int_argument`]); the range must lie
/// within `T`.
pub(crate) fn int_in<T: TryFrom<i128>>(name: impl Display, value: &Bound<'_, PyAny>, min: T, max: T) -> PyResult<T>
where
    i128: From<T>,
{
    let number = int_argument(&name, value, i128::from(min), i128::from(max))?;
    T::try_from(number).map_err(|_| invalid_argument(format!("{name}={number}: out of range")))
}

/// A non-negative integer argument that fits `usize` (a count or a limit).
pub(crate) fn usize_argument(name: impl Display, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    let max = i128::try_from(usize::MAX).unwrap_or(i128::MAX);
    let number = int_argument(&name, value, 0, max)?;
    usize::try_from(number).map_err(|_| invalid_argument(format!("{name}={number}: out of range")))
}

/// A `str` argument, borrowed. A string that is not valid Unicode (a lone surrogate) raises
/// `InvalidArgumentError`.
pub(crate) fn str_argument<'a>(name: impl Display, value: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let text = value.cast::<PyString>().map_err(|_| expected(&name, "a str", value))?;
    text.to_str().map_err(|error| invalid_argument(format!("{name}: {error}")))
}

/// An optional `str` argument, borrowed (`None` stays `None`).
pub(crate) fn optional_str<'a>(name: impl Display, value: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<&'a str>> {
    value.map(|value| str_argument(name, value)).transpose()
}

/// A `str` argument, owned.
pub(crate) fn string_argument(name: impl Display, value: &Bound<'_, PyAny>) -> PyResult<String> {
    str_argument(name, value).map(str::to_owned)
}

/// An argument PyO3 converts to `T` (a `bool`, a `float`, a path, ...), accepting what PyO3
/// accepts: a `TypeError` becomes `ArgumentTypeError` naming the argument and saying what was
/// `expected`, another failure (a number too large for a `float`) `InvalidArgumentError`.
pub(crate) fn extract_argument<'py, T>(name: impl Display, value: &Bound<'py, PyAny>, what: &str) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py, Error = PyErr>,
{
    value.extract::<T>().map_err(|error| {
        if error.is_instance_of::<PyTypeError>(value.py()) {
            expected(&name, what, value)
        } else {
            invalid_argument(format!("{name}: {error}"))
        }
    })
}

/// A `bool` argument (`True` or `False`; PyO3 also takes `numpy.bool_`).
pub(crate) fn bool_argument(name: impl Display, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    extract_argument(name, value, "a bool")
}

/// A number argument as `f64` (a float, an int, or an object with `__float__`).
pub(crate) fn float_argument(name: impl Display, value: &Bound<'_, PyAny>) -> PyResult<f64> {
    extract_argument(name, value, "a number")
}

/// Largest timeout in seconds a binding accepts (about 31 years: "wait for ever" in practice).
pub(crate) const MAX_TIMEOUT_SECONDS: f64 = 1e9;

/// A timeout of `value` seconds: finite, `>= 0` and at most [`MAX_TIMEOUT_SECONDS`], else
/// `ConfigError` naming `name`.
pub(crate) fn seconds(name: &str, value: f64) -> PyResult<std::time::Duration> {
    if !value.is_finite() || !(0.0..=MAX_TIMEOUT_SECONDS).contains(&value) {
        return Err(super::errors::config_error(format!("{name}={value}: must be a finite number of seconds >= 0")));
    }
    Ok(std::time::Duration::from_secs_f64(value))
}

/// A path argument (a `str` or an `os.PathLike`).
pub(crate) fn path_argument(name: impl Display, value: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    extract_argument(name, value, "a str or os.PathLike path")
}

/// A callable argument (checked before it is stored or first called).
pub(crate) fn callable_argument(name: impl Display, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if value.is_callable() {
        Ok(())
    } else {
        Err(expected(name, "a callable", value))
    }
}

/// An argument that must be an instance of the class `T` (`what` names it in errors).
pub(crate) fn instance_argument<'a, 'py, T: PyTypeCheck>(
    name: impl Display,
    value: &'a Bound<'py, PyAny>,
    what: &str,
) -> PyResult<&'a Bound<'py, T>> {
    value.cast::<T>().map_err(|_| expected(name, what, value))
}

/// A sequence argument (any iterable but a `str` or `bytes`, which are refused rather than
/// split), each item converted by `item` under the name `name[index]`.
pub(crate) fn sequence_argument<'py, T>(
    name: impl Display,
    value: &Bound<'py, PyAny>,
    what: &str,
    mut item: impl FnMut(Item<'_>, &Bound<'py, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    if value.is_instance_of::<PyString>() || value.is_instance_of::<PyBytes>() {
        return Err(expected(name, what, value));
    }
    let items = value.try_iter().map_err(|_| expected(&name, what, value))?;
    let mut converted = Vec::with_capacity(value.len().unwrap_or(0));
    for (index, each) in items.enumerate() {
        converted.push(item(Item { parent: &name, index }, &each?)?);
    }
    Ok(converted)
}

/// A sequence of `str` (any iterable of them but a single `str`).
pub(crate) fn strings_argument(name: impl Display, value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    sequence_argument(name, value, "a sequence of str", |item, each| string_argument(item, each))
}

/// Extractors for `#[pyo3(from_py_with = ...)]` on the parameters that have a default value:
/// PyO3 calls one only for an argument actually given (`None` included, which is refused as
/// before), so the default stays the one in the signature. Each applies its helper under the
/// argument's name.
pub(crate) mod named {
    use pyo3::prelude::*;

    use super::{bool_argument, float_argument, int_in, str_argument, usize_argument};

    macro_rules! named_arguments {
        ($($function:ident -> $type:ty = $helper:ident;)*) => {$(
            #[doc = concat!("The `", stringify!($function), "` argument (`", stringify!($helper), "`).")]
            #[allow(clippy::needless_lifetimes)] // `&'a str` results borrow from the argument
            pub(crate) fn $function<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<$type> {
                $helper(stringify!($function), value)
            }
        )*};
    }

    /// A `u64` argument (milliseconds, a seed).
    fn u64_argument(name: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
        int_in(name, value, 0, u64::MAX)
    }

    named_arguments! {
        as_arrow -> bool = bool_argument;
        auto_ack -> bool = bool_argument;
        backlog_budget -> usize = usize_argument;
        bootstrap_timeout_ms -> u64 = u64_argument;
        cycle_ms -> u64 = u64_argument;
        duplicate -> f64 = float_argument;
        heartbeat_interval_ms -> u64 = u64_argument;
        host -> &'a str = str_argument;
        image -> bool = bool_argument;
        liveness_timeout_ms -> u64 = u64_argument;
        loss -> f64 = float_argument;
        max_messages -> usize = usize_argument;
        reorder -> f64 = float_argument;
        resend_timeout_ms -> u64 = u64_argument;
        seed -> u64 = u64_argument;
        selection -> &'a str = str_argument;
        timeout -> f64 = float_argument;
        timeout_ms -> u64 = u64_argument;
        yield_when_idle -> bool = bool_argument;
    }
}
