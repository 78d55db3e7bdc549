//! Panics caught with `catch_unwind`, told in words.

use std::any::Any;

/// The message a caught panic carried (`panic!("...")` gives a `&str` or a `String`).
pub fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}
