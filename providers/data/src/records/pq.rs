//! Parquet input: record batches from the parquet crate's Arrow reader, turned into JSON
//! values column by column.

use std::fs::File;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Number, Value};

use super::{Cancelled, End, Flow, Item, Record};

/// Rows per batch read.
const BATCH_ROWS: usize = 8192;

/// The number of rows, from the footer alone.
pub fn row_count(file: File) -> Result<u64> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| anyhow!("not a readable Parquet file: {e}"))?;
    Ok(builder.metadata().file_metadata().num_rows().max(0) as u64)
}

/// Reads every row.
pub fn read(
    file: File,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(Item) -> Result<Flow>,
) -> Result<End> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| anyhow!("not a readable Parquet file: {e}"))?;
    let header: Vec<Arc<str>> = builder
        .schema()
        .fields()
        .iter()
        .map(|f| Arc::from(f.name().as_str()))
        .collect();
    let reader = builder
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| anyhow!("cannot read the Parquet file: {e}"))?;
    let mut at: u64 = 0;
    for batch in reader {
        let batch = batch.map_err(|e| anyhow!("after row {at}: {e}"))?;
        if cancelled() {
            bail!("cancelled");
        }
        let columns: Vec<Vec<Value>> = batch
            .columns()
            .iter()
            .zip(header.iter())
            .map(|(col, name)| column_values(col).map_err(|e| anyhow!("column {name:?}: {e}")))
            .collect::<Result<_>>()?;
        let mut iters: Vec<std::vec::IntoIter<Value>> =
            columns.into_iter().map(Vec::into_iter).collect();
        for _ in 0..batch.num_rows() {
            at += 1;
            let fields = header
                .iter()
                .zip(iters.iter_mut())
                .map(|(name, it)| (name.clone(), it.next().unwrap_or(Value::Null)))
                .collect();
            if f(Item::Record(Record { at, fields }))? == Flow::Stop {
                return Ok(End {
                    complete: false,
                    header: Some(header),
                    types: None,
                });
            }
        }
    }
    Ok(End {
        complete: true,
        header: Some(header),
        types: None,
    })
}

fn float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// Every value of one Arrow column as JSON; nulls are `null`.
pub fn column_values(col: &ArrayRef) -> Result<Vec<Value>> {
    let n = col.len();
    let each = |g: &dyn Fn(usize) -> Value| -> Vec<Value> {
        (0..n)
            .map(|i| if col.is_null(i) { Value::Null } else { g(i) })
            .collect()
    };
    macro_rules! prim {
        ($t:ty, $conv:expr) => {{
            let a = col.as_primitive::<$t>();
            each(&|i| $conv(a.value(i)))
        }};
    }
    Ok(match col.data_type() {
        DataType::Null => vec![Value::Null; n],
        DataType::Boolean => {
            let a = col.as_boolean();
            each(&|i| Value::Bool(a.value(i)))
        }
        DataType::Int8 => prim!(Int8Type, Value::from),
        DataType::Int16 => prim!(Int16Type, Value::from),
        DataType::Int32 => prim!(Int32Type, Value::from),
        DataType::Int64 => prim!(Int64Type, Value::from),
        DataType::UInt8 => prim!(UInt8Type, Value::from),
        DataType::UInt16 => prim!(UInt16Type, Value::from),
        DataType::UInt32 => prim!(UInt32Type, Value::from),
        DataType::UInt64 => prim!(UInt64Type, Value::from),
        DataType::Float16 => prim!(Float16Type, |x: F16| float(f64::from(x.to_f32()))),
        DataType::Float32 => prim!(Float32Type, |x: f32| float(f64::from(x))),
        DataType::Float64 => prim!(Float64Type, float),
        DataType::Utf8 => {
            let a = col.as_string::<i32>();
            each(&|i| Value::String(a.value(i).to_string()))
        }
        DataType::LargeUtf8 => {
            let a = col.as_string::<i64>();
            each(&|i| Value::String(a.value(i).to_string()))
        }
        DataType::Utf8View => {
            let a = col.as_string_view();
            each(&|i| Value::String(a.value(i).to_string()))
        }
        DataType::Binary => {
            let a = col.as_binary::<i32>();
            each(&|i| Value::String(String::from_utf8_lossy(a.value(i)).into_owned()))
        }
        DataType::LargeBinary => {
            let a = col.as_binary::<i64>();
            each(&|i| Value::String(String::from_utf8_lossy(a.value(i)).into_owned()))
        }
        DataType::Date32 => {
            let a = col.as_primitive::<Date32Type>();
            each(&|i| {
                a.value_as_date(i)
                    .map_or(Value::Null, |d| Value::String(d.to_string()))
            })
        }
        DataType::Date64 => {
            let a = col.as_primitive::<Date64Type>();
            each(&|i| {
                a.value_as_date(i)
                    .map_or(Value::Null, |d| Value::String(d.to_string()))
            })
        }
        DataType::Timestamp(unit, zone) => {
            // An instant (a column with a zone) is shown in UTC, marked `Z`.
            let z = if zone.is_some() { "Z" } else { "" };
            macro_rules! ts {
                ($t:ty) => {{
                    let a = col.as_primitive::<$t>();
                    each(&|i| {
                        a.value_as_datetime(i).map_or(Value::Null, |d| {
                            Value::String(format!("{}{z}", d.format("%Y-%m-%dT%H:%M:%S%.f")))
                        })
                    })
                }};
            }
            match unit {
                TimeUnit::Second => ts!(TimestampSecondType),
                TimeUnit::Millisecond => ts!(TimestampMillisecondType),
                TimeUnit::Microsecond => ts!(TimestampMicrosecondType),
                TimeUnit::Nanosecond => ts!(TimestampNanosecondType),
            }
        }
        DataType::Decimal128(_, scale) => {
            let a = col.as_primitive::<Decimal128Type>();
            let scale = *scale;
            each(&|i| {
                let text = Decimal128Type::format_decimal(a.value(i), a.precision(), scale);
                text.parse::<f64>().map_or(Value::String(text), float)
            })
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                if col.is_null(i) {
                    out.push(Value::Null);
                    continue;
                }
                let inner = match col.data_type() {
                    DataType::List(_) => col.as_list::<i32>().value(i),
                    _ => col.as_list::<i64>().value(i),
                };
                out.push(Value::Array(column_values(&inner)?));
            }
            out
        }
        DataType::Struct(fields) => {
            let a = col.as_struct();
            let children: Vec<Vec<Value>> = a
                .columns()
                .iter()
                .map(column_values)
                .collect::<Result<_>>()?;
            (0..n)
                .map(|i| {
                    if col.is_null(i) {
                        return Value::Null;
                    }
                    let m: Map<String, Value> = fields
                        .iter()
                        .zip(children.iter())
                        .map(|(f, c)| (f.name().clone(), c[i].clone()))
                        .collect();
                    Value::Object(m)
                })
                .collect()
        }
        DataType::Dictionary(_, _) => {
            let d = col.as_any_dictionary();
            let values = column_values(d.values())?;
            let keys = d.normalized_keys();
            (0..n)
                .map(|i| {
                    if col.is_null(i) {
                        Value::Null
                    } else {
                        values.get(keys[i]).cloned().unwrap_or(Value::Null)
                    }
                })
                .collect()
        }
        other => bail!("the Arrow type {other} is not one the data tools read"),
    })
}

type F16 = <Float16Type as arrow_array::ArrowPrimitiveType>::Native;
