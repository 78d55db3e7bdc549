//! xlsx input, read only: one sheet streamed cell by cell with calamine; its first row is
//! the header.

use std::fs::File;
use std::io::BufReader;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use calamine::{DataRef, Reader, Xlsx};
use serde_json::{Number, Value};

use super::{header_names, Cancelled, End, Flow, Item, Record};
use crate::Limits;

/// The sheet names of a workbook.
pub fn sheet_names(file: File) -> Result<Vec<String>> {
    let wb: Xlsx<_> =
        Xlsx::new(BufReader::new(file)).map_err(|e| anyhow!("not a readable xlsx file: {e}"))?;
    Ok(wb.sheet_names())
}

/// Reads the rows of one sheet (by name or 0-based index; the first by default).
pub fn read(
    file: File,
    sheet: Option<&str>,
    limits: &Limits,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(Item) -> Result<Flow>,
) -> Result<End> {
    let mut wb: Xlsx<_> =
        Xlsx::new(BufReader::new(file)).map_err(|e| anyhow!("not a readable xlsx file: {e}"))?;
    let names = wb.sheet_names();
    let name = match sheet {
        None => names
            .first()
            .cloned()
            .ok_or_else(|| anyhow!("the workbook has no sheets"))?,
        Some(s) if names.iter().any(|n| n == s) => s.to_string(),
        Some(s) => match s.parse::<usize>() {
            Ok(i) if i < names.len() => names[i].clone(),
            _ => bail!(
                "no sheet {s:?}; the sheets are {} (by name or 0-based index)",
                names
                    .iter()
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    };
    let mut cells = wb
        .worksheet_cells_reader(&name)
        .map_err(|e| anyhow!("sheet {name:?}: {e}"))?;
    let mut header: Option<Vec<Arc<str>>> = None;
    let mut row: Vec<Value> = Vec::new();
    let mut row_no: Option<u32> = None;
    let mut count: u64 = 0;
    let mut emit = |header: &mut Option<Vec<Arc<str>>>,
                    row: &mut Vec<Value>,
                    at: u32|
     -> Result<Flow> {
        let values = std::mem::take(row);
        match header {
            None => {
                *header = Some(header_names(values.iter().map(|v| match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                })));
                Ok(Flow::Go)
            }
            Some(h) => {
                if values.iter().all(Value::is_null) {
                    return Ok(Flow::Go);
                }
                let fields = h
                    .iter()
                    .enumerate()
                    .map(|(i, name)| (name.clone(), values.get(i).cloned().unwrap_or(Value::Null)))
                    .collect();
                f(Item::Record(Record {
                    at: u64::from(at) + 1,
                    fields,
                }))
            }
        }
    };
    while let Some(cell) = cells
        .next_cell()
        .map_err(|e| anyhow!("sheet {name:?}: {e}"))?
    {
        count += 1;
        if count > limits.max_xlsx_cells {
            bail!(
                "sheet {name:?} has more than {} cells, the limit ([data] max_xlsx_cells)",
                limits.max_xlsx_cells
            );
        }
        if count.is_multiple_of(65536) && cancelled() {
            bail!("cancelled");
        }
        let (r, c) = cell.get_position();
        if row_no != Some(r) {
            if let Some(prev) = row_no {
                if emit(&mut header, &mut row, prev)? == Flow::Stop {
                    return Ok(End {
                        complete: false,
                        header,
                    });
                }
            }
            row_no = Some(r);
        }
        let c = c as usize;
        if c > 16_384 {
            bail!("sheet {name:?}: a cell beyond column 16384");
        }
        if row.len() <= c {
            row.resize(c + 1, Value::Null);
        }
        row[c] = cell_value(cell.get_value());
    }
    if let Some(prev) = row_no {
        if emit(&mut header, &mut row, prev)? == Flow::Stop {
            return Ok(End {
                complete: false,
                header,
            });
        }
    }
    Ok(End {
        complete: true,
        header: Some(header.unwrap_or_default()),
    })
}

fn cell_value(v: &DataRef<'_>) -> Value {
    match v {
        DataRef::Int(i) => Value::from(*i),
        DataRef::Float(x) => {
            if x.fract() == 0.0 && x.abs() < 9.0e15 {
                Value::from(*x as i64)
            } else {
                Number::from_f64(*x).map_or(Value::Null, Value::Number)
            }
        }
        DataRef::String(s) => Value::String(s.clone()),
        DataRef::SharedString(s) => Value::String(s.to_string()),
        DataRef::Bool(b) => Value::Bool(*b),
        DataRef::DateTime(d) => match d.as_datetime() {
            Some(t) => {
                let s = t.format("%Y-%m-%dT%H:%M:%S").to_string();
                Value::String(
                    s.strip_suffix("T00:00:00")
                        .map_or(s.clone(), str::to_string),
                )
            }
            None => Number::from_f64(d.as_f64()).map_or(Value::Null, Value::Number),
        },
        DataRef::DateTimeIso(s) | DataRef::DurationIso(s) => Value::String(s.clone()),
        DataRef::Error(e) => Value::String(format!("#{e:?}")),
        DataRef::Empty => Value::Null,
    }
}
