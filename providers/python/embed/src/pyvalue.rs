//! Python objects from a tape and onto one (see `toolbox-python-tape`), for the driver's
//! requests and answers: no JSON text and no value tree on this side of the boundary. The
//! mapping is what `json.dumps(..., default=str)` followed by a JSON parse would give. Tested
//! from the provider, through `toolbox_embed_eval` (providers/python/src/backend/embedded.rs).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use toolbox_python_tape::{Item, Reader, Writer};

/// Deeper than this, a driver answer is refused (a self-referencing list, say).
const MAX_DEPTH: usize = 200;

fn tape_error(e: String) -> PyErr {
    PyValueError::new_err(format!("a bad tape from the provider: {e}"))
}

/// The next value on `tape` as the equivalent Python object: dict, list, str, int, float,
/// bool or None.
pub(crate) fn from_tape<'py>(
    py: Python<'py>,
    tape: &mut Reader<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    from_tape_at(py, tape, 0)
}

fn from_tape_at<'py>(
    py: Python<'py>,
    tape: &mut Reader<'_>,
    depth: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "a request nested deeper than {MAX_DEPTH} levels"
        )));
    }
    Ok(match tape.item().map_err(tape_error)? {
        Item::Null => py.None().into_bound(py),
        Item::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Item::I64(i) => i.into_pyobject(py)?.into_any(),
        Item::U64(u) => u.into_pyobject(py)?.into_any(),
        Item::F64(f) => PyFloat::new(py, f).into_any(),
        Item::Str(text) => PyString::new(py, text).into_any(),
        Item::Array(count) => {
            let list = PyList::empty(py);
            for _ in 0..count {
                list.append(from_tape_at(py, tape, depth + 1)?)?;
            }
            list.into_any()
        }
        Item::Object(count) => {
            let dict = PyDict::new(py);
            for _ in 0..count {
                let key = tape.key().map_err(tape_error)?;
                dict.set_item(key, from_tape_at(py, tape, depth + 1)?)?;
            }
            dict.into_any()
        }
    })
}

/// Writes a Python object onto `tape`. Dicts, lists, tuples, strings, numbers, booleans and
/// None map as `json` maps them (a float that is not finite reads back as null, as JSON has
/// no NaN); an int beyond 64 bits is written as its digits, a dict key that is not a string
/// and any other object as its `str()`.
pub(crate) fn to_tape(obj: &Bound<'_, PyAny>, tape: &mut Writer) -> PyResult<()> {
    to_tape_at(obj, tape, 0)
}

/// A str's text: its UTF-8 as CPython caches it (no copy inside Python), or, for a str that
/// is not valid UTF-8 (a lone surrogate), the lossy conversion.
fn with_text<T>(text: &Bound<'_, PyString>, f: impl FnOnce(&str) -> T) -> T {
    match text.to_str() {
        Ok(utf8) => f(utf8),
        Err(_) => f(&text.to_string_lossy()),
    }
}

fn to_tape_at(obj: &Bound<'_, PyAny>, tape: &mut Writer, depth: usize) -> PyResult<()> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "the answer is nested deeper than {MAX_DEPTH} levels"
        )));
    }
    if obj.is_none() {
        tape.null();
        return Ok(());
    }
    // bool before int: True is an int in Python.
    if let Ok(b) = obj.cast::<PyBool>() {
        tape.bool(b.is_true());
        return Ok(());
    }
    if let Ok(text) = obj.cast::<PyString>() {
        with_text(text, |t| tape.str(t));
        return Ok(());
    }
    if let Ok(int) = obj.cast::<PyInt>() {
        if let Ok(i) = int.extract::<i64>() {
            tape.i64(i);
        } else if let Ok(u) = int.extract::<u64>() {
            tape.u64(u);
        } else {
            // Beyond 64 bits: the digits, as text, rather than a rounded float.
            with_text(&int.str()?, |t| tape.str(t));
        }
        return Ok(());
    }
    if let Ok(float) = obj.cast::<PyFloat>() {
        tape.f64(float.value());
        return Ok(());
    }
    // Counts are set after the items: a `__str__` run on the way may change a list's length.
    if let Ok(dict) = obj.cast::<PyDict>() {
        let at = tape.open_object();
        let mut count = 0;
        for (key, item) in dict.iter() {
            match key.cast::<PyString>() {
                Ok(text) => with_text(text, |t| tape.key(t)),
                Err(_) => with_text(&key.str()?, |t| tape.key(t)),
            }
            to_tape_at(&item, tape, depth + 1)?;
            count += 1;
        }
        tape.close(at, count);
        return Ok(());
    }
    if let Ok(list) = obj.cast::<PyList>() {
        let at = tape.open_array();
        let mut count = 0;
        for item in list.iter() {
            to_tape_at(&item, tape, depth + 1)?;
            count += 1;
        }
        tape.close(at, count);
        return Ok(());
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        tape.array(tuple.len());
        for item in tuple.iter() {
            to_tape_at(&item, tape, depth + 1)?;
        }
        return Ok(());
    }
    with_text(&obj.str()?, |t| tape.str(t));
    Ok(())
}
