"""Writes a text-heavy PDF for the pdf benchmarks: `python bench/pdf_make.py OUT.pdf [PAGES]`.

Each page carries about 3 KB of text in 40-odd lines (Latin-1 core font, so accented
characters are real text, not images).
"""
import sys

from fpdf import FPDF

out = sys.argv[1]
pages = int(sys.argv[2]) if len(sys.argv) > 2 else 100

pdf = FPDF()
pdf.set_title("toolbox benchmark document")
pdf.set_author("toolbox bench")
pdf.set_font("Helvetica", size=10)
for page in range(1, pages + 1):
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 14)
    pdf.cell(0, 10, f"Chapter {page}", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=10)
    for para in range(6):
        pdf.multi_cell(
            0,
            5,
            f"Page {page}, paragraph {para}. The quick brown fox jumps over the lazy dog; "
            "café naïve Zürich façade. Lorem ipsum dolor sit amet, consectetur adipiscing "
            "elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim "
            "ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea "
            "commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit.",
        )
        pdf.ln(2)
pdf.output(out)
