"""Render the slide images of the example cases (examples/*/slides/*.png).

Not part of the medpanel package: it needs matplotlib and Pillow, which medpanel does not depend on.
Run it from any environment that has them, e.g.

    python3 -m venv /tmp/slidevenv && /tmp/slidevenv/bin/pip install matplotlib pillow
    /tmp/slidevenv/bin/python examples/make_slides.py

Every number drawn here is synthetic and matches the case.yaml beside the slides. The output is
deterministic: no timestamps or software tags in the PNGs, and a fixed 64-colour palette step keeps
each file small (well under 60 KB at 800x500).
"""

from __future__ import annotations

import io
from datetime import date
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Circle, Ellipse, FancyBboxPatch, Polygon  # noqa: E402
from PIL import Image  # noqa: E402

HERE = Path(__file__).resolve().parent
NAVY, RED, GREY, LIGHT, GREEN, ORANGE = "#1f3b5c", "#c0392b", "#7f8c8d", "#eef2f6", "#2e8b57", "#e67e22"
plt.rcParams.update({"font.family": "DejaVu Sans", "font.size": 10})


# ---------------------------------------------------------------- helpers


def slide(title: str, subtitle: str = ""):
    """An 800x500 figure with a title band; returns (figure, axes covering the body in 0..1 coordinates)."""
    fig = plt.figure(figsize=(8, 5), dpi=100)
    fig.patch.set_facecolor("white")
    band = fig.add_axes((0, 0.89, 1, 0.11))
    band.set_axis_off()
    band.add_patch(plt.Rectangle((0, 0), 1, 1, color=NAVY))
    band.text(0.02, 0.5, title, color="white", fontsize=15, fontweight="bold", va="center")
    if subtitle:
        band.text(0.98, 0.5, subtitle, color="white", fontsize=9, va="center", ha="right")
    fig.text(0.99, 0.01, "Synthetic case - not a real patient", fontsize=7, color=GREY, ha="right")
    return fig


def body(fig, rect=(0.04, 0.06, 0.92, 0.8)):
    ax = fig.add_axes(rect)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_axis_off()
    return ax


def text_box(ax, x, y, w, h, heading, lines, size=9.5):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01", fc=LIGHT, ec=NAVY, lw=1, clip_on=False))
    ax.text(x + 0.02, y + h - 0.03, heading, fontsize=11, fontweight="bold", color=NAVY, va="top")
    ax.text(x + 0.02, y + h - 0.10, "\n".join(lines), fontsize=size, va="top", linespacing=1.45)


def table(ax, header, rows, col_x, top=0.97, row_h=0.058, size=9.5, highlight=lambda row: None):
    """A plain table drawn as text; `highlight(row)` may return a colour for the row's band."""
    for x, h in zip(col_x, header):
        ax.text(x, top, h, fontsize=size, fontweight="bold", color="white", va="center")
    ax.add_patch(plt.Rectangle((0, top - row_h / 2), 1, row_h, color=NAVY, zorder=-1))
    for i, row in enumerate(rows, 1):
        y = top - i * row_h
        colour = highlight(row) or (LIGHT if i % 2 else "white")
        ax.add_patch(plt.Rectangle((0, y - row_h / 2), 1, row_h, color=colour, zorder=-1))
        for x, cell in zip(col_x, row):
            ax.text(x, y, cell, fontsize=size, va="center")
    return top - len(rows) * row_h - row_h / 2


def save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    buf.seek(0)
    image = Image.open(buf).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, optimize=True)
    print(f"{path.relative_to(HERE)}: {image.size[0]}x{image.size[1]}, {path.stat().st_size // 1024} KB")


# ---------------------------------------------------------------- prostate case

PSA = [  # (date, ng/mL)
    (date(2022, 2, 14), 4.4),
    (date(2022, 8, 10), 4.9),
    (date(2023, 2, 6), 5.6),
    (date(2023, 8, 21), 6.3),
    (date(2024, 2, 12), 7.4),
    (date(2024, 8, 5), 8.6),
    (date(2025, 1, 13), 9.4),
]


def prostate_psa(out: Path) -> None:
    fig = slide("PSA history", "Feb 2022 - Jan 2025")
    ax = fig.add_axes((0.09, 0.12, 0.86, 0.68))
    days, values = zip(*PSA)
    ax.plot(days, values, "-o", color=NAVY, lw=2, ms=6)
    for d, v in PSA:
        ax.annotate(f"{v:.1f}", (d, v), textcoords="offset points", xytext=(0, 9), ha="center", fontsize=10, fontweight="bold")
    for d, colour in [(date(2023, 9, 18), GREY), (date(2024, 9, 16), GREY), (date(2024, 10, 21), RED)]:
        ax.axvline(d, color=colour, ls="--", lw=1)
    ax.text(date(2023, 9, 28), 10.6, "12-core systematic\nbiopsy: benign", fontsize=8.5, color=GREY, va="top")
    ax.text(date(2024, 9, 8), 2.2, "MRI\nPI-RADS 4", fontsize=8.5, color=GREY, ha="right", va="bottom")
    ax.text(date(2024, 10, 31), 2.2, "Targeted biopsy\nGG2 (3+4)", fontsize=8.5, color=RED, va="bottom")
    ax.axhline(4.0, color=GREEN, lw=1, ls=":")
    ax.text(date(2022, 1, 1), 3.7, "4.0 ng/mL", color=GREEN, fontsize=8, va="top")
    ax.set_ylim(2, 11)
    ax.set_xlim(date(2021, 12, 1), date(2025, 4, 1))
    ax.set_ylabel("PSA (ng/mL)")
    ax.xaxis.set_major_locator(mdates.MonthLocator(bymonth=(1, 7)))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%b %Y"))
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    fig.text(0.09, 0.83, "Doubling time about 32 months   |   PSA density 0.20 ng/mL/mL (gland 48 mL)", fontsize=10, color=NAVY)
    save(fig, out)


def prostate_mri(out: Path) -> None:
    fig = slide("Prostate MRI (3T, biparametric + DCE)", "16 Sep 2024")
    ax = fig.add_axes((0.03, 0.06, 0.44, 0.8))
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.45, 1.15)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.text(0, 1.08, "Axial schematic at the base", ha="center", fontsize=10, fontweight="bold", color=NAVY)
    ax.add_patch(Ellipse((0, 0), 2.2, 1.7, fc="#f6e7d8", ec="black", lw=1.5))  # gland
    ax.add_patch(Ellipse((0, 0.12), 1.3, 0.95, fc="#e8d1b9", ec="#8c6d4f", lw=1, ls="--"))  # transition zone
    ax.add_patch(Circle((0, 0.35), 0.07, fc="white", ec="black"))  # urethra
    ax.add_patch(Ellipse((0, -1.2), 1.0, 0.35, fc="#d9d9d9", ec=GREY))  # rectum
    ax.text(0, -1.2, "rectum", ha="center", va="center", fontsize=8, color="black")
    ax.text(0, 0.12, "TZ", ha="center", fontsize=9, color="#8c6d4f")
    ax.text(0.62, -0.55, "PZ", ha="center", fontsize=9, color="#8c6d4f")
    # radiological convention: the patient's right is on the viewer's left
    ax.add_patch(Ellipse((-0.68, -0.42), 0.34, 0.26, angle=-30, fc=RED, ec="darkred", alpha=0.9))
    ax.annotate("11 mm lesion\nright base PZ", (-0.8, -0.5), xytext=(-1.28, -1.0), fontsize=9, color=RED, fontweight="bold",
                arrowprops={"arrowstyle": "->", "color": RED})
    ax.text(-1.25, 0.9, "R", fontsize=13, fontweight="bold")
    ax.text(1.15, 0.9, "L", fontsize=13, fontweight="bold")
    ax.text(0, -0.95, "capsule intact", ha="center", fontsize=8, color=GREEN)
    right = body(fig, (0.5, 0.06, 0.47, 0.8))
    text_box(right, 0, 0.02, 1, 0.96, "Findings", [
        "PI-RADS v2.1 category 4",
        "Right base, posterolateral peripheral zone",
        "Size 11 x 8 mm",
        "T2: lenticular low signal",
        "DWI: marked restriction (ADC 780)",
        "DCE: early focal enhancement",
        "Capsular contact 6 mm",
        "No extraprostatic extension",
        "Seminal vesicles clear",
        "No enlarged pelvic nodes",
        "Gland volume 48 mL; PSA density 0.20",
    ], size=10)
    save(fig, out)


def prostate_pathology(out: Path) -> None:
    fig = slide("Biopsy pathology", "MRI-fusion transperineal biopsy, 21 Oct 2024")
    ax = body(fig, (0.03, 0.06, 0.94, 0.81))
    rows = [
        ("Target T1", "Right base PZ lesion", "3+4 = 7", "GG2", "60%"),
        ("Target T2", "Right base PZ lesion", "3+4 = 7", "GG2", "40%"),
        ("Target T3", "Right base PZ lesion", "3+3 = 6", "GG1", "15%"),
        ("Systematic", "Right base lateral", "3+4 = 7", "GG2", "25%"),
        ("Systematic", "Right mid lateral", "3+3 = 6", "GG1", "5%"),
        ("Systematic", "Other 4 right cores (medial, apex)", "benign", "-", "0%"),
        ("Systematic", "All 6 left cores (base, mid, apex)", "benign", "-", "0%"),
    ]
    bottom = table(ax, ("Core", "Site", "Gleason", "Grade Group", "% of core"), rows, (0.01, 0.15, 0.58, 0.71, 0.86),
                   row_h=0.085, size=10.5, highlight=lambda r: "#f8d7d3" if r[3] == "GG2" else None)
    text_box(ax, 0, 0.0, 1, bottom - 0.03, "Summary", [
        "Targeted cores 3/3 positive; systematic cores 2/12 positive (17%), all on the right.",
        "Highest grade: Grade Group 2 (3+4), up to 60% of one core; pattern 4 about 10% of tumour.",
        "No cribriform pattern, no intraductal carcinoma, no perineural invasion.",
    ], size=10)
    save(fig, out)


def prostate_staging(out: Path) -> None:
    fig = slide("Staging and risk summary", "Tumor board, Feb 2025")
    ax = body(fig)
    cards = [
        ("Clinical stage", ["cT1c N0 M0 (AJCC 8th stage IIB)", "DRE: smooth, enlarged, no nodule", "N0: no suspicious nodes on MRI",
                            "M0: asymptomatic; bone scan / PSMA", "      PET not indicated for this risk"]),
        ("Risk group", ["NCCN favourable intermediate", "One factor: Grade Group 2", "PSA < 10; < 50% cores positive",
                        "CAPRA score 2", "Life expectancy > 10 years"]),
        ("Key values", ["PSA 9.4 ng/mL (Jan 2025)", "PSA doubling time ~32 months", "PSA density 0.20 ng/mL/mL",
                        "Max core 60%, pattern 4 ~10%", "No cribriform / intraductal"]),
        ("Patient", ["69 y, ECOG 0, retired teacher", "Hypertension, type 2 diabetes", "BPH on tamsulosin, IPSS 9",
                     "IIEF-5 19 (mild ED)", "Priority: continence, erections"]),
    ]
    for i, (heading, lines) in enumerate(cards):
        x, y = (i % 2) * 0.52, 0.5 if i < 2 else 0.0
        text_box(ax, x, y + 0.03, 0.48, 0.43, heading, lines, size=10.5)
    save(fig, out)


# ---------------------------------------------------------------- lung case

NODES = {  # station: (x, y, status) in the schematic's coordinates
    "2R": (-0.22, 0.62, "benign"),
    "4R": (-0.2, 0.38, "positive"),
    "4L": (0.2, 0.38, "negative"),
    "7": (0.0, 0.08, "negative"),
    "10R": (-0.36, 0.2, "positive"),
    "10L": (0.36, 0.2, "benign"),
    "11R": (-0.52, 0.05, "benign"),
}
NODE_COLOUR = {"positive": RED, "negative": GREEN, "benign": "#bdc3c7"}


def lung_ct_pet(out: Path) -> None:
    fig = slide("Staging CT and FDG-PET/CT", "Jan 2025; EBUS-TBNA Feb 2025")
    ax = fig.add_axes((0.02, 0.06, 0.46, 0.8))
    ax.set_xlim(-1.1, 1.1)
    ax.set_ylim(-1.0, 1.1)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.text(0.55, 1.03, "Coronal schematic", ha="center", fontsize=10, fontweight="bold", color=NAVY)
    right_lung = Polygon([(-0.12, 0.85), (-0.45, 0.9), (-0.85, 0.4), (-0.95, -0.6), (-0.3, -0.75), (-0.12, -0.3)], fc="#e3f0fa", ec=NAVY)
    left_lung = Polygon([(0.12, 0.85), (0.45, 0.9), (0.85, 0.4), (0.95, -0.6), (0.4, -0.75), (0.25, -0.35), (0.12, -0.2)], fc="#e3f0fa", ec=NAVY)
    ax.add_patch(right_lung)
    ax.add_patch(left_lung)
    ax.plot([0, 0, -0.15], [1.0, 0.2, 0.05], color=GREY, lw=4)  # trachea and right main bronchus
    ax.plot([0, 0.15], [0.2, 0.05], color=GREY, lw=4)
    ax.plot([-0.95, -0.5], [0.3, 0.42], color=NAVY, lw=0.8, ls=":")  # horizontal fissure, roughly
    ax.add_patch(Circle((-0.55, 0.6), 0.16, fc=RED, ec="darkred"))
    ax.annotate("3.8 cm RUL mass\nSUVmax 11.2", (-0.6, 0.72), xytext=(-1.08, 0.98), fontsize=8.5, color=RED, fontweight="bold",
                arrowprops={"arrowstyle": "->", "color": RED})
    for name, (x, y, status) in NODES.items():
        ax.add_patch(Circle((x, y), 0.065, fc=NODE_COLOUR[status], ec="black", lw=0.6, zorder=3))
        ax.text(x, y, name, ha="center", va="center", fontsize=6.5, fontweight="bold", zorder=4)
    ax.text(-1.05, -0.9, "R", fontsize=13, fontweight="bold")
    ax.text(0.98, -0.9, "L", fontsize=13, fontweight="bold")
    for i, (status, label) in enumerate([("positive", "EBUS positive"), ("negative", "EBUS negative"), ("benign", "not avid, not sampled")]):
        ax.scatter([-0.1], [-0.78 - 0.09 * i], s=45, c=NODE_COLOUR[status], edgecolors="black", linewidths=0.5)
        ax.text(-0.02, -0.78 - 0.09 * i, label, fontsize=7.5, va="center")
    right = body(fig, (0.5, 0.06, 0.47, 0.8))
    text_box(right, 0, 0.02, 1, 0.96, "Findings", [
        "RUL spiculated mass 3.8 x 3.1 cm, SUVmax 11.2",
        "No pleural or chest wall invasion",
        "Station 4R node 1.6 cm, SUVmax 6.8",
        "Station 10R node 1.1 cm, SUVmax 4.1",
        "Station 7 node 0.8 cm, SUVmax 2.1",
        "EBUS-TBNA: 4R and 10R adenocarcinoma;",
        "    4L and 7 negative",
        "No adrenal, bone or liver uptake",
        "Brain MRI: no metastases",
        "Stage: cT2a N2 M0 = IIIA (AJCC 8th)",
        "    single-station N2 (4R)",
    ], size=9.8)
    save(fig, out)


def lung_biomarkers(out: Path) -> None:
    fig = slide("Pathology and biomarkers", "Core biopsy RUL + EBUS 4R; 52-gene DNA/RNA NGS panel")
    ax = body(fig, (0.03, 0.06, 0.94, 0.81))
    rows = [
        ("Histology", "Adenocarcinoma, acinar predominant; TTF-1 +, p40 -", "-"),
        ("EGFR", "No mutation (incl. exon 19 del, L858R, exon 20 ins)", "Negative"),
        ("ALK", "No fusion (NGS RNA); IHC D5F3 negative", "Negative"),
        ("ROS1 / RET / NTRK", "No fusion", "Negative"),
        ("BRAF / MET / HER2", "No V600E, no MET exon 14 skipping, no ERBB2 mutation", "Negative"),
        ("KRAS", "G12V (VAF 18%); not G12C", "Detected"),
        ("STK11 / KEAP1", "Wild-type", "-"),
        ("PD-L1 (22C3)", "Tumour proportion score 55%", "High (>=50%)"),
        ("TMB", "9 mutations/Mb", "Intermediate"),
    ]
    colour = {"Negative": "#dff0e3", "Detected": "#fdebd0", "High (>=50%)": "#f8d7d3"}
    table(ax, ("Test", "Result", "Call"), rows, (0.01, 0.22, 0.82), top=0.95, row_h=0.1, size=10,
          highlight=lambda r: colour.get(r[2]))
    save(fig, out)


PFT = [  # test, measured % predicted, predicted postoperative % after RUL lobectomy (16/19 segments)
    ("FEV1\n2.10 L", 78),
    ("FVC\n3.05 L", 92),
    ("DLCO", 64),
]


def lung_pft(out: Path) -> None:
    fig = slide("Pulmonary function tests", "Feb 2025; post-bronchodilator")
    ax = fig.add_axes((0.09, 0.12, 0.55, 0.68))
    keep = 16 / 19  # right upper lobe holds 3 of 19 segments
    xs = range(len(PFT))
    measured = [m for _, m in PFT]
    ppo = [round(m * keep) for m in measured]
    ax.bar([x - 0.2 for x in xs], measured, 0.38, color=NAVY, label="Measured")
    ax.bar([x + 0.2 for x in xs], ppo, 0.38, color=ORANGE, label="Predicted postoperative")
    for x, m, p in zip(xs, measured, ppo):
        ax.text(x - 0.2, m + 1.5, f"{m}%", ha="center", fontsize=10, fontweight="bold")
        ax.text(x + 0.2, p + 1.5, f"{p}%", ha="center", fontsize=10, fontweight="bold")
    ax.axhline(60, color=RED, ls="--", lw=1)
    ax.text(2.43, 61.5, "60%\nthreshold", color=RED, fontsize=8.5, va="bottom")
    ax.set_xlim(-0.6, 2.95)
    ax.set_xticks(list(xs), [t for t, _ in PFT])
    ax.set_ylabel("% predicted")
    ax.set_ylim(0, 110)
    ax.legend(loc="upper right", fontsize=9, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    notes = body(fig, (0.67, 0.1, 0.31, 0.72))
    text_box(notes, 0, 0, 1, 1, "Interpretation", [
        "FEV1/FVC 0.69:",
        "mild-moderate obstruction",
        "(COPD, GOLD 2)",
        "",
        f"ppo FEV1 {ppo[0]}%: acceptable",
        f"ppo DLCO {ppo[2]}%: between",
        "30% and 60%",
        "",
        "Next: stair-climb or",
        "shuttle-walk test before",
        "right upper lobectomy",
    ], size=9.5)
    save(fig, out)


if __name__ == "__main__":
    prostate = HERE / "prostate" / "slides"
    prostate_psa(prostate / "01_psa_trend.png")
    prostate_mri(prostate / "02_mri_findings.png")
    prostate_pathology(prostate / "03_biopsy_cores.png")
    prostate_staging(prostate / "04_staging_summary.png")
    lung = HERE / "lung" / "slides"
    lung_ct_pet(lung / "01_ct_pet_nodes.png")
    lung_biomarkers(lung / "02_biomarkers.png")
    lung_pft(lung / "03_pulmonary_function.png")
