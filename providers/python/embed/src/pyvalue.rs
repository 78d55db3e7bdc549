//! JSON values to Python objects and back, for the embedded backend's driver calls. Tested
//! from the provider, through `toolbox_embed_eval` (providers/python/src/backend/embedded.rs).
//!
//! The isolated worker speaks JSON lines, but the embedded interpreter lives in this process:
//! handing it a dict and reading a dict back skips `json.loads` and `json.dumps` on every
//! call, which is a large part of a small cell's cost when the caches are cold. The mapping
//! back is what `json.dumps(..., default=str)` followed by a JSON parse would give.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// Deeper than this, a driver answer is refused (a self-referencing list, say).
const MAX_DEPTH: usize = 200;

/// `value` as the equivalent Python object: dict, list, str, int, float, bool or None.
pub(crate) fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any(),
        },
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let items = items
                .iter()
                .map(|item| to_python(py, item))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, to_python(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// A Python object as JSON. Dicts, lists, tuples, strings, numbers, booleans and None map
/// as `json` maps them (a float that is not finite becomes null, as JSON has no NaN); a dict
/// key that is not a string, and any other object, is written as its `str()`.
pub(crate) fn from_python(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    convert(obj, 0)
}

fn convert(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "the answer is nested deeper than {MAX_DEPTH} levels"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    // bool before int: True is an int in Python.
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(text) = obj.cast::<PyString>() {
        return Ok(Value::String(text.to_string_lossy().into_owned()));
    }
    if let Ok(int) = obj.cast::<PyInt>() {
        if let Ok(i) = int.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = int.extract::<u64>() {
            return Ok(Value::from(u));
        }
        // Beyond 64 bits: the digits, as text, rather than a rounded float.
        return Ok(Value::String(int.str()?.to_string_lossy().into_owned()));
    }
    if let Ok(float) = obj.cast::<PyFloat>() {
        return Ok(Number::from_f64(float.value()).map_or(Value::Null, Value::Number));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut map = Map::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let key = match key.cast::<PyString>() {
                Ok(text) => text.to_string_lossy().into_owned(),
                Err(_) => key.str()?.to_string_lossy().into_owned(),
            };
            map.insert(key, convert(&item, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        return list.iter().map(|item| convert(&item, depth + 1)).collect();
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return tuple.iter().map(|item| convert(&item, depth + 1)).collect();
    }
    Ok(Value::String(obj.str()?.to_string_lossy().into_owned()))
}
