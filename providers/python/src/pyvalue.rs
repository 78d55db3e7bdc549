//! JSON values to Python objects and back, for the embedded backend's driver calls.
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Python started the way the embedded backend starts it (its own thread, its signal
    /// handler), since tests of this crate share one process and one interpreter.
    async fn python() {
        crate::embedded::ready()
            .await
            .expect("the embedded interpreter");
    }

    async fn round_trip(code: &std::ffi::CStr) -> PyResult<Value> {
        python().await;
        Python::attach(|py| {
            let value = py.eval(code, None, None)?;
            from_python(&value)
        })
    }

    #[tokio::test]
    async fn json_values_round_trip_through_python() {
        python().await;
        let value = json!({
            "code": "x = 1\nprint('é')",
            "n": -3, "big": u64::MAX, "f": 1.5, "t": true, "none": null,
            "list": [1, "two", [3.0], {"four": false}],
        });
        let back = Python::attach(|py| from_python(&to_python(py, &value)?)).unwrap();
        assert_eq!(back, value);
    }

    #[tokio::test]
    async fn python_objects_map_as_json_dumps_with_default_str() {
        assert_eq!(
            round_trip(c"{1: (True, None), 'nan': float('nan'), 'big': 2**70}")
                .await
                .unwrap(),
            json!({"1": [true, null], "nan": null, "big": "1180591620717411303424"})
        );
        assert_eq!(
            round_trip(c"{'s': {3}, 'r': range(2)}").await.unwrap(),
            json!({"s": "{3}", "r": "range(0, 2)"})
        );
        // A lone surrogate cannot be UTF-8: it is replaced, not an error.
        let lossy = round_trip(c"'a\\udc80b'").await.unwrap();
        assert!(
            lossy
                .as_str()
                .is_some_and(|s| s.starts_with('a') && s.ends_with('b') && s.contains('\u{fffd}')),
            "{lossy}"
        );
    }

    #[tokio::test]
    async fn a_self_referencing_answer_is_refused_not_followed_forever() {
        python().await;
        let e = Python::attach(|py| {
            let l = PyList::empty(py);
            l.append(&l)?;
            from_python(l.as_any())
        })
        .unwrap_err();
        assert!(e.to_string().contains("nested deeper than 200"), "{e}");
    }
}
