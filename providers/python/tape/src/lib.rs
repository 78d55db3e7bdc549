//! The value format between the python provider and its CPython layer
//! (`providers/python/embed`), which are built separately and meet only through a C ABI.
//!
//! A driver request goes in and an answer comes out on every `run_python_code` call. As JSON
//! text each would be formatted, scanned for escapes and parsed on both sides; as a tape each
//! item is a tag byte and, for numbers, 8 little-endian bytes, for text a `u32` length and its
//! UTF-8 bytes, for arrays and objects a `u32` count of what follows (an object's keys are
//! texts without a tag). The layer writes Python objects straight onto a tape and builds them
//! straight from one, with no value tree in between.
//!
//! The reader checks everything (tags, lengths, UTF-8, depth, trailing bytes) and fails with
//! a message, never a panic: a tape crossed a library boundary.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use serde_json::{Map, Number, Value};

/// An item's tag.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    Null = 0,
    False = 1,
    True = 2,
    I64 = 3,
    U64 = 4,
    F64 = 5,
    Str = 6,
    Array = 7,
    Object = 8,
}

impl Tag {
    fn from_byte(byte: u8) -> Option<Tag> {
        Some(match byte {
            0 => Tag::Null,
            1 => Tag::False,
            2 => Tag::True,
            3 => Tag::I64,
            4 => Tag::U64,
            5 => Tag::F64,
            6 => Tag::Str,
            7 => Tag::Array,
            8 => Tag::Object,
            _ => return None,
        })
    }
}

/// Deeper than this, a tape is refused (the layer refuses deeper Python objects first).
pub const MAX_DEPTH: usize = 256;

/// Appends items to a tape.
#[derive(Debug, Default)]
pub struct Writer {
    /// The tape so far.
    pub bytes: Vec<u8>,
}

impl Writer {
    /// An empty tape with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Writer {
        Writer {
            bytes: Vec::with_capacity(capacity),
        }
    }

    /// `null`.
    pub fn null(&mut self) {
        self.bytes.push(Tag::Null as u8);
    }

    /// `true` or `false`.
    pub fn bool(&mut self, value: bool) {
        self.bytes
            .push(if value { Tag::True } else { Tag::False } as u8);
    }

    /// A signed integer.
    pub fn i64(&mut self, value: i64) {
        self.bytes.push(Tag::I64 as u8);
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// An unsigned integer above `i64::MAX` (smaller ones may use either).
    pub fn u64(&mut self, value: u64) {
        self.bytes.push(Tag::U64 as u8);
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// A float (a reader turns one that is not finite into `null`, as JSON has none).
    pub fn f64(&mut self, value: f64) {
        self.bytes.push(Tag::F64 as u8);
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// A text.
    pub fn str(&mut self, text: &str) {
        self.bytes.push(Tag::Str as u8);
        self.len_and(text.as_bytes());
    }

    /// An array of `count` items, which follow.
    pub fn array(&mut self, count: usize) {
        self.bytes.push(Tag::Array as u8);
        self.count(count);
    }

    /// An object of `count` entries, which follow, each a [`Writer::key`] and an item.
    pub fn object(&mut self, count: usize) {
        self.bytes.push(Tag::Object as u8);
        self.count(count);
    }

    /// An array whose items follow and whose count is given later, to [`Writer::close`]
    /// (for a source whose length may change while it is walked); the place to close.
    pub fn open_array(&mut self) -> usize {
        self.bytes.push(Tag::Array as u8);
        self.count(0);
        self.bytes.len() - 4
    }

    /// An object, as [`Writer::open_array`].
    pub fn open_object(&mut self) -> usize {
        self.bytes.push(Tag::Object as u8);
        self.count(0);
        self.bytes.len() - 4
    }

    /// Sets the count of the array or object opened at `at`.
    pub fn close(&mut self, at: usize, count: usize) {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        self.bytes[at..at + 4].copy_from_slice(&count.to_le_bytes());
    }

    /// An object's key.
    pub fn key(&mut self, key: &str) {
        self.len_and(key.as_bytes());
    }

    /// Writes `value` whole.
    pub fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.null(),
            Value::Bool(b) => self.bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => self.i64(i),
                (None, Some(u)) => self.u64(u),
                _ => self.f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(text) => self.str(text),
            Value::Array(items) => {
                self.array(items.len());
                for item in items {
                    self.value(item);
                }
            }
            Value::Object(map) => {
                self.object(map.len());
                for (key, item) in map {
                    self.key(key);
                    self.value(item);
                }
            }
        }
    }

    fn count(&mut self, count: usize) {
        // Counts and lengths are u32: a driver request or answer is far below 4 GiB.
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        self.bytes.extend_from_slice(&count.to_le_bytes());
    }

    fn len_and(&mut self, bytes: &[u8]) {
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(&bytes[..len as usize]);
    }
}

/// `value` as a tape.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut writer = Writer::with_capacity(256);
    writer.value(value);
    writer.bytes
}

/// Reads items off a tape, front to back.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// One item read: a scalar, or the start of an array or object with its count.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Item<'a> {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(&'a str),
    Array(usize),
    Object(usize),
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// Whether the whole tape was read.
    pub fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| format!("a tape cut short at byte {}", self.at))?;
        let bytes = &self.bytes[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn eight(&mut self) -> Result<[u8; 8], String> {
        let mut out = [0; 8];
        out.copy_from_slice(self.take(8)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<usize, String> {
        let mut out = [0; 4];
        out.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(out) as usize)
    }

    /// The next item.
    pub fn item(&mut self) -> Result<Item<'a>, String> {
        let at = self.at;
        let byte = self.take(1)?[0];
        let tag =
            Tag::from_byte(byte).ok_or_else(|| format!("an unknown tag {byte} at byte {at}"))?;
        Ok(match tag {
            Tag::Null => Item::Null,
            Tag::False => Item::Bool(false),
            Tag::True => Item::Bool(true),
            Tag::I64 => Item::I64(i64::from_le_bytes(self.eight()?)),
            Tag::U64 => Item::U64(u64::from_le_bytes(self.eight()?)),
            Tag::F64 => Item::F64(f64::from_le_bytes(self.eight()?)),
            Tag::Str => Item::Str(self.key()?),
            // Each item is at least one byte: a count beyond what is left is a lie.
            Tag::Array => Item::Array(self.count()?),
            Tag::Object => Item::Object(self.count()?),
        })
    }

    /// An object's key.
    pub fn key(&mut self) -> Result<&'a str, String> {
        let at = self.at;
        let len = self.u32()?;
        std::str::from_utf8(self.take(len)?)
            .map_err(|e| format!("text at byte {at} is not UTF-8: {e}"))
    }

    fn count(&mut self) -> Result<usize, String> {
        let count = self.u32()?;
        if count > self.bytes.len() - self.at {
            return Err(format!(
                "a count of {count} at byte {} beyond the tape",
                self.at
            ));
        }
        Ok(count)
    }

    /// The next item, whole, as a JSON value.
    pub fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("a tape nested deeper than {MAX_DEPTH} levels"));
        }
        Ok(match self.item()? {
            Item::Null => Value::Null,
            Item::Bool(b) => Value::Bool(b),
            Item::I64(i) => Value::from(i),
            Item::U64(u) => Value::from(u),
            Item::F64(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
            Item::Str(text) => Value::String(text.to_string()),
            Item::Array(count) => {
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            Item::Object(count) => {
                let mut map = Map::new();
                for _ in 0..count {
                    let key = self.key()?.to_string();
                    map.insert(key, self.value(depth + 1)?);
                }
                Value::Object(map)
            }
        })
    }
}

/// A whole tape as a JSON value; bytes left over are an error.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let mut reader = Reader::new(bytes);
    let value = reader.value(0)?;
    if !reader.is_done() {
        return Err(format!("{} bytes after the value", bytes.len() - reader.at));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_round_trip() {
        let value = json!({
            "code": "x = 1\nprint('é')", "n": -3, "big": u64::MAX, "f": 1.5, "t": true,
            "none": null, "list": [1, "two", [3.0], {"four": false}], "empty": {}, "e": [],
        });
        assert_eq!(decode(&encode(&value)).unwrap(), value);
    }

    #[test]
    fn a_bad_tape_is_an_error_not_a_panic() {
        let good = encode(&json!({"a": [1, "bc"]}));
        // Every prefix is cut short; none panics.
        for end in 0..good.len() {
            assert!(decode(&good[..end]).is_err(), "{end}");
        }
        let mut extra = good.clone();
        extra.push(0);
        assert!(decode(&extra).unwrap_err().contains("after the value"));
        assert!(decode(&[9]).unwrap_err().contains("unknown tag 9"));
        // A count far beyond the bytes left.
        assert!(decode(&[7, 255, 255, 255, 255])
            .unwrap_err()
            .contains("beyond the tape"));
        // Text that is not UTF-8.
        assert!(decode(&[6, 1, 0, 0, 0, 0xff])
            .unwrap_err()
            .contains("not UTF-8"));
        // Too deep.
        let mut deep = Vec::new();
        for _ in 0..=MAX_DEPTH + 1 {
            deep.extend_from_slice(&[7, 1, 0, 0, 0]);
        }
        deep.push(0);
        assert!(decode(&deep).unwrap_err().contains("deeper than"));
        // Counts given at the end.
        let mut late = Writer::default();
        let at = late.open_array();
        late.i64(1);
        late.str("x");
        late.close(at, 2);
        assert_eq!(decode(&late.bytes).unwrap(), json!([1, "x"]));
        // A float that JSON cannot hold reads as null.
        let mut nan = Writer::default();
        nan.f64(f64::NAN);
        assert_eq!(decode(&nan.bytes).unwrap(), Value::Null);
    }
}
