//! Bytes borrowed from Python objects, defined once for every binding: contiguous buffer views
//! and pyarrow binary/string arrays whose offsets are checked in full (inside the offsets buffer,
//! non-negative, non-decreasing, within the data buffer) before any slice is taken.

use std::fmt::Display;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::args::expected;
use super::errors::{invalid_argument, wrong_type};

/// A contiguous buffer view kept alive (and un-resizable) while its slice is used.
pub(crate) struct BufferView {
    unsigned: Option<PyBuffer<u8>>,
    signed: Option<PyBuffer<i8>>,
}

impl BufferView {
    /// Takes a view of `object` (bytes, bytearray, memoryview, a pyarrow buffer, ...); `what`
    /// names the argument in errors.
    pub(crate) fn new(object: &Bound<'_, PyAny>, what: impl Display) -> PyResult<BufferView> {
        let type_error = || expected(&what, "bytes or a bytes-like object", object);
        // pyarrow buffers export signed bytes ("b"); bytes, bytearray and memoryview unsigned.
        let view = match PyBuffer::<u8>::get(object) {
            Ok(buffer) => BufferView { unsigned: Some(buffer), signed: None },
            Err(_) => {
                BufferView { unsigned: None, signed: Some(PyBuffer::<i8>::get(object).map_err(|_| type_error())?) }
            }
        };
        let contiguous = match (&view.unsigned, &view.signed) {
            (Some(buffer), _) => buffer.is_c_contiguous(),
            (None, Some(buffer)) => buffer.is_c_contiguous(),
            (None, None) => false,
        };
        if !contiguous {
            return Err(invalid_argument(format!("{what}: the buffer must be C-contiguous")));
        }
        Ok(view)
    }

    /// The viewed bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        let (pointer, length) = match (&self.unsigned, &self.signed) {
            (Some(buffer), _) => (buffer.buf_ptr() as *const u8, buffer.len_bytes()),
            (None, Some(buffer)) => (buffer.buf_ptr() as *const u8, buffer.len_bytes()),
            (None, None) => return &[],
        };
        if length == 0 || pointer.is_null() {
            return &[];
        }
        // SAFETY: the buffer is C-contiguous and `length` bytes long; the exported view held
        // in `self` keeps the exporter from freeing or resizing it while `self` lives.
        unsafe { std::slice::from_raw_parts(pointer, length) }
    }
}

/// Calls `f` with the bytes of a bytes-like object (`bytes` without taking a buffer view);
/// `what` names the argument in errors.
pub(crate) fn with_bytes<R>(object: &Bound<'_, PyAny>, what: impl Display, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(bytes) = object.cast::<PyBytes>() {
        return Ok(f(bytes.as_bytes()));
    }
    let view = BufferView::new(object, what)?;
    Ok(f(view.as_slice()))
}

/// Whether `object` looks like a pyarrow array (has `buffers`, `type` and `offset`).
pub(crate) fn is_arrow(object: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(object.hasattr("buffers")? && object.hasattr("type")? && object.hasattr("offset")?)
}

/// A pyarrow binary or string array, checked: element `i` is `data[offsets[i]..offsets[i + 1]]`.
pub(crate) struct ArrowBinary {
    offsets: Vec<usize>,
    data: Option<BufferView>,
}

impl ArrowBinary {
    /// Elements in the array.
    pub(crate) fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// The elements, in order.
    pub(crate) fn slices(&self) -> impl Iterator<Item = &[u8]> {
        let data = self.data.as_ref().map(BufferView::as_slice).unwrap_or(b"");
        // Offsets were checked against `data` when the array was read.
        self.offsets.windows(2).map(move |pair| data.get(pair[0]..pair[1]).unwrap_or(b""))
    }
}

/// Reads a pyarrow `binary` / `large_binary` array (and `string` / `large_string` when
/// `allow_str`) with no nulls; `what` names the argument in errors.
pub(crate) fn arrow_binary(array: &Bound<'_, PyAny>, allow_str: bool, what: &str) -> PyResult<ArrowBinary> {
    let type_name = array.getattr("type")?.str()?.to_string();
    let large = match type_name.as_str() {
        "binary" => false,
        "large_binary" => true,
        "string" | "utf8" if allow_str => false,
        "large_string" | "large_utf8" if allow_str => true,
        other => {
            let allowed =
                if allow_str { "binary, large_binary, string or large_string" } else { "binary or large_binary" };
            return Err(wrong_type(format!("{what}: expected a pyarrow {allowed} array, got type {other}")));
        }
    };
    if array.getattr("null_count")?.extract::<i64>()? != 0 {
        return Err(invalid_argument(format!("{what}: the arrow array contains nulls")));
    }
    let count: usize = array.len()?;
    if count == 0 {
        return Ok(ArrowBinary { offsets: Vec::new(), data: None });
    }
    let first: usize = array.getattr("offset")?.extract()?;
    let buffers = array.call_method0("buffers")?;
    let buffer_count = buffers.len()?;
    if buffer_count != 3 {
        return Err(invalid_argument(format!(
            "{what}: a binary array has 3 buffers (validity, offsets, data), this one {buffer_count}"
        )));
    }
    let offsets_object = buffers.get_item(1)?;
    if offsets_object.is_none() {
        return Err(invalid_argument(format!("{what}: the arrow array has no offsets buffer")));
    }
    let data_object = buffers.get_item(2)?;
    let data = if data_object.is_none() { None } else { Some(BufferView::new(&data_object, what)?) };
    let data_length = data.as_ref().map_or(0, |view| view.as_slice().len());
    let offsets_view = BufferView::new(&offsets_object, what)?;
    let offsets = arrow_offsets(offsets_view.as_slice(), large, count, first, data_length)
        .map_err(|message| invalid_argument(format!("{what}: malformed arrow array: {message}")))?;
    Ok(ArrowBinary { offsets, data })
}

/// The `count + 1` offsets of an Arrow binary array starting at element `first`, checked:
/// inside the offsets buffer, non-negative, non-decreasing, and ending within `data_length`.
fn arrow_offsets(
    bytes: &[u8],
    large: bool,
    count: usize,
    first: usize,
    data_length: usize,
) -> Result<Vec<usize>, String> {
    let width: usize = if large { 8 } else { 4 };
    let end = first.checked_add(count).ok_or("the array offset and length overflow")?;
    let needed = end.checked_add(1).and_then(|n| n.checked_mul(width)).ok_or("the array offset and length overflow")?;
    if bytes.len() < needed {
        return Err(format!(
            "the offsets buffer holds {} bytes, shorter than the array needs ({needed}: {} offsets of {width} bytes from element {first})",
            bytes.len(),
            count.saturating_add(1)
        ));
    }
    let mut offsets = Vec::with_capacity(count.saturating_add(1));
    let mut previous = 0usize;
    let start = first.checked_mul(width).ok_or("the array offset and length overflow")?;
    for (index, chunk) in bytes.get(start..needed).unwrap_or(&[]).chunks_exact(width).enumerate() {
        let value: i64 = match *chunk {
            [a, b, c, d] => i64::from(i32::from_le_bytes([a, b, c, d])),
            [a, b, c, d, e, f, g, h] => i64::from_le_bytes([a, b, c, d, e, f, g, h]),
            _ => return Err("offsets buffer of an unexpected width".into()),
        };
        let element = first.saturating_add(index);
        let offset = usize::try_from(value).map_err(|_| format!("offset {element} is negative ({value})"))?;
        if index > 0 && offset < previous {
            return Err(format!("offsets are not monotonic: offset {element} is {offset}, after {previous}"));
        }
        if offset > data_length {
            return Err(format!("offset {element} is {offset}, beyond the data buffer of {data_length} bytes"));
        }
        offsets.push(offset);
        previous = offset;
    }
    Ok(offsets)
}
