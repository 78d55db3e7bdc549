//! xlsx input, read only: one sheet streamed cell by cell with calamine; its first row is
//! the header.

use std::fs::File;
use std::io::BufReader;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use calamine::{DataRef, Reader, Xlsx};
use serde_json::{Number, Value};

use super::{header_names, Cancelled, End, Flow, Item, Record};
use crate::InputLimits;

/// Checks every entry of the workbook's zip before calamine opens it (calamine reads the
/// shared-strings table whole, and a text node whole): each entry's declared and actual size
/// within `[data] max_decompressed_bytes` and the expansion rule of `.gz`/`.zst`; the
/// shared-strings table within `max_xlsx_strings_bytes` and `max_xlsx_strings`; no text in
/// any XML part (a cell, a shared string, a tag) longer than `max_cell_bytes`. Entries are
/// inflated through a fixed buffer, so the check itself holds little.
pub fn check_zip(file: &File, limits: &InputLimits, cancelled: Cancelled<'_>) -> Result<()> {
    use crate::{MAX_EXPANSION_RATIO, RATIO_FLOOR_BYTES};
    use std::io::{Read, Seek};
    let mut reader = file.try_clone()?;
    reader.rewind()?;
    let mut zip = zip::ZipArchive::new(BufReader::new(reader))
        .map_err(|e| anyhow!("not a readable xlsx file (its zip: {e})"))?;
    if zip.len() > 100_000 {
        bail!(
            "not a plausible xlsx file: its zip holds {} entries",
            zip.len()
        );
    }
    let mut buf = vec![0u8; 64 * 1024];
    for i in 0..zip.len() {
        let (name, declared, compressed) = {
            let entry = zip
                .by_index_raw(i)
                .map_err(|e| anyhow!("not a readable xlsx file (entry {i}: {e})"))?;
            let name = entry
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| format!("entry {i}"));
            (name, entry.size(), entry.compressed_size())
        };
        let lower = name.to_ascii_lowercase();
        let strings = lower.ends_with("sharedstrings.xml");
        let cap = if strings {
            limits
                .max_xlsx_strings_bytes
                .min(limits.max_decompressed_bytes)
        } else {
            limits.max_decompressed_bytes
        };
        let cap_key = if strings && limits.max_xlsx_strings_bytes < limits.max_decompressed_bytes {
            "max_xlsx_strings_bytes"
        } else {
            "max_decompressed_bytes"
        };
        let over = |size: u64| {
            anyhow!(
                "its part {name:?} expands past {cap} bytes ({size} and more), the limit \
                 ([data] {cap_key}); refused as a possible decompression bomb"
            )
        };
        if declared > cap {
            return Err(over(declared));
        }
        let xml = lower.ends_with(".xml") || lower.ends_with(".rels");
        let mut entry = zip
            .by_index(i)
            .map_err(|e| anyhow!("not a readable xlsx file (its part {name:?}: {e})"))?;
        let mut total: u64 = 0;
        let mut run: u64 = 0;
        let mut strings_seen: u64 = 0;
        // How much of `<si` was just seen (0 to 3), carried across reads.
        let mut opening: u8 = 0;
        loop {
            let n = entry
                .read(&mut buf)
                .map_err(|e| anyhow!("not a readable xlsx file (its part {name:?}: {e})"))?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > cap {
                return Err(over(total));
            }
            if total > RATIO_FLOOR_BYTES && total / compressed.max(1) > MAX_EXPANSION_RATIO {
                bail!(
                    "its part {name:?} expands more than {MAX_EXPANSION_RATIO} times its size \
                     ({compressed} bytes to over {total}); refused as a decompression bomb"
                );
            }
            if total % (16 * 1024 * 1024) < n as u64 && cancelled() {
                bail!("cancelled");
            }
            if !xml {
                continue;
            }
            for &b in &buf[..n] {
                if b == b'<' || b == b'>' {
                    run = 0;
                } else {
                    run += 1;
                    if run > limits.max_cell_bytes {
                        bail!(
                            "its part {name:?} holds a text (a cell, a string) longer than {} \
                             bytes, the limit ([data] max_cell_bytes)",
                            limits.max_cell_bytes
                        );
                    }
                }
                if strings {
                    // `<si>`, `<si ` or `<si/` opens a shared string.
                    opening = match (opening, b) {
                        (_, b'<') => 1,
                        (1, b's') => 2,
                        (2, b'i') => 3,
                        (3, b'>' | b' ' | b'/') => {
                            strings_seen += 1;
                            0
                        }
                        _ => 0,
                    };
                }
            }
            if strings && strings_seen > limits.max_xlsx_strings {
                {
                    bail!(
                        "its shared-strings table holds more than {} strings, the limit \
                         ([data] max_xlsx_strings)",
                        limits.max_xlsx_strings
                    );
                }
            }
        }
    }
    Ok(())
}

/// Reads the rows of one sheet (by name or 0-based index; the first by default).
pub fn read(
    file: File,
    sheet: Option<&str>,
    limits: &InputLimits,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(Item) -> Result<Flow>,
) -> Result<End> {
    check_zip(&file, limits, cancelled)?;
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
                        types: None,
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
                types: None,
            });
        }
    }
    Ok(End {
        complete: true,
        header: Some(header.unwrap_or_default()),
        types: None,
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
