"""Render the slide images of the example cases (examples/*/slides/*.png).

Not part of the medpanel package: it needs matplotlib and Pillow, which medpanel does not depend on.
Run it from any environment that has them, e.g.

    python3 -m venv /tmp/slidevenv && /tmp/slidevenv/bin/pip install matplotlib pillow
    /tmp/slidevenv/bin/python examples/make_slides.py              # every case
    /tmp/slidevenv/bin/python examples/make_slides.py breast lung  # only these
    /tmp/slidevenv/bin/python examples/make_slides.py --out /tmp/x # elsewhere (tests compare)

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
from matplotlib.patches import Circle, Ellipse, FancyBboxPatch, Polygon, Wedge  # noqa: E402
import numpy as np  # noqa: E402
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
    shown = path.relative_to(HERE) if path.is_relative_to(HERE) else path
    print(f"{shown}: {image.size[0]}x{image.size[1]}, {path.stat().st_size // 1024} KB")


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


# ---------------------------------------------------------------- breast case


def breast_imaging(out: Path) -> None:
    fig = slide("Breast imaging", "Mammography, ultrasound and MRI, Jan 2025")
    ax = fig.add_axes((0.02, 0.06, 0.46, 0.8))
    ax.set_xlim(-1.5, 1.6)
    ax.set_ylim(-1.35, 1.55)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.text(0.05, 1.47, "Left breast, frontal view (clock face)", ha="center", fontsize=10, fontweight="bold", color=NAVY)
    ax.add_patch(Polygon([(0.55, 0.8), (1.05, 1.25), (1.35, 1.05), (0.95, 0.45)], fc="#f6e7d8", ec="black", lw=1))  # axillary tail
    ax.add_patch(Circle((0, 0), 1.0, fc="#f6e7d8", ec="black", lw=1.5))
    ax.add_patch(Circle((0, 0), 0.07, fc="#c49a7a", ec="black", lw=0.8))  # nipple
    for hour in range(1, 13):
        angle = np.deg2rad(90 - 30 * hour)
        ax.text(1.13 * np.cos(angle), 1.13 * np.sin(angle), str(hour), ha="center", va="center", fontsize=7.5, color=GREY)
    # 2 o'clock, 6 cm from the nipple on a 10 cm radius
    mx, my = 0.6 * np.cos(np.deg2rad(30)), 0.6 * np.sin(np.deg2rad(30))
    spikes = [(mx + (0.19 if i % 2 else 0.12) * np.cos(a), my + (0.19 if i % 2 else 0.12) * np.sin(a))
              for i, a in enumerate(np.linspace(0, 2 * np.pi, 16, endpoint=False))]
    ax.add_patch(Polygon(spikes, fc=RED, ec="darkred", alpha=0.9))
    ax.plot([0, mx], [0, my], color=GREY, lw=0.8, ls="--")
    ax.text(mx / 2 - 0.02, my / 2 + 0.06, "6 cm", fontsize=8, color=GREY, rotation=30, ha="center")
    ax.annotate("3.2 cm spiculated\nmass, 2 o'clock", (mx - 0.1, my - 0.12), xytext=(-1.45, -1.25), fontsize=9, color=RED,
                fontweight="bold", arrowprops={"arrowstyle": "->", "color": RED})
    ax.add_patch(Ellipse((1.1, 1.0), 0.2, 0.13, angle=30, fc=ORANGE, ec="black", lw=0.8))
    ax.annotate("level I node, cortex 6 mm", (1.02, 1.05), xytext=(-0.55, 1.22), fontsize=8.5, color=ORANGE, fontweight="bold",
                arrowprops={"arrowstyle": "->", "color": ORANGE})
    for x, y in [(mx + 0.03, my + 0.02), (1.12, 1.0)]:
        ax.plot([x - 0.04, x + 0.04], [y - 0.04, y + 0.04], color="black", lw=1.6)  # marker clips
    ax.text(0.75, -1.25, "x = marker clip", fontsize=8, color="black")
    ax.text(-1.25, -0.4, "medial", fontsize=8.5, fontweight="bold", color=GREY, ha="center")
    ax.text(1.28, -0.4, "lateral", fontsize=8.5, fontweight="bold", color=GREY, ha="center")
    right = body(fig, (0.5, 0.06, 0.47, 0.8))
    text_box(right, 0, 0.02, 1, 0.96, "Findings", [
        "Mammography: ACR density C; 3.2 cm",
        "    irregular spiculated mass, 2 o'clock,",
        "    6 cm from nipple; BI-RADS 5",
        "Calcifications: fine pleomorphic,",
        "    confined to the mass",
        "Ultrasound: 3.0 x 2.4 x 2.2 cm mass;",
        "    one level I node, cortex 6 mm,",
        "    fatty hilum effaced; others normal",
        "MRI: unifocal 3.4 cm mass; no skin or",
        "    chest wall involvement; right breast",
        "    clear; no internal mammary nodes",
        "Core biopsies of mass and node; both clipped",
    ], size=9.5)
    save(fig, out)


def breast_pathology(out: Path) -> None:
    fig = slide("Pathology and receptors", "US-guided core biopsies, Jan 2025")
    ax = body(fig, (0.03, 0.06, 0.94, 0.81))
    rows = [
        ("Histology", "Invasive carcinoma, no special type (ductal)", "-"),
        ("Grade", "Nottingham grade 3 (score 8: 3 + 3 + 2)", "High"),
        ("ER", "80% of tumour cells, strong", "Positive"),
        ("PR", "10% of tumour cells, moderate", "Positive"),
        ("HER2", "IHC 3+ (complete, intense membrane staining)", "Positive"),
        ("Ki-67", "40%", "High"),
        ("Stromal TILs", "20%", "-"),
        ("Axillary node core", "Metastatic carcinoma", "Positive"),
        ("Germline panel", "BRCA1/2, PALB2, TP53, PTEN, CHEK2, ATM, CDH1", "No variant"),
    ]
    colour = {"Positive": "#f8d7d3", "High": "#fdebd0", "No variant": "#dff0e3"}
    bottom = table(ax, ("Test", "Result", "Call"), rows, (0.01, 0.22, 0.82), top=0.95, row_h=0.088, size=10,
                   highlight=lambda r: colour.get(r[2]))
    ax.text(0.01, bottom - 0.06, "HER2 IHC 3+: in situ hybridisation not required.   Family history: maternal aunt, breast cancer at 62.",
            fontsize=9.5, color=NAVY, va="top")
    save(fig, out)


def breast_staging(out: Path) -> None:
    fig = slide("Staging and work-up", "Tumor board, Feb 2025")
    ax = body(fig)
    cards = [
        ("Clinical stage", ["cT2 cN1 M0 (AJCC 8th anatomic IIB)", "T2: 3.2 cm (3.4 cm on MRI)", "N1: one biopsy-proven level I node",
                            "Unifocal; no skin / chest wall", "Left breast, upper outer quadrant"]),
        ("Systemic work-up", ["CT chest-abdomen-pelvis: clear", "Bone scan: no metastases", "Echocardiogram: LVEF 62%",
                              "FBC, renal and liver tests normal", "Germline panel: no variant"]),
        ("Tumour biology", ["ER 80% / PR 10%", "HER2 IHC 3+ (positive)", "Grade 3, Ki-67 40%",
                            "TILs 20%", "Node core: metastatic carcinoma"]),
        ("Patient", ["47 y, premenopausal, ECOG 0", "Pharmacist; two teenage children", "Mild asthma; BMI 26",
                     "Wants to keep her breast", "Asks about scalp cooling"]),
    ]
    for i, (heading, lines) in enumerate(cards):
        x, y = (i % 2) * 0.52, 0.5 if i < 2 else 0.0
        text_box(ax, x, y + 0.03, 0.48, 0.43, heading, lines, size=10.5)
    save(fig, out)


# ---------------------------------------------------------------- colorectal case


def colorectal_endoscopy(out: Path) -> None:
    fig = slide("Endoscopy and laboratory results", "Dec 2024 - Jan 2025")
    ax = fig.add_axes((0.03, 0.06, 0.36, 0.8))
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.2, 16.5)
    ax.set_axis_off()
    ax.text(0, 16.0, "Distance from anal verge (cm)", ha="center", fontsize=10, fontweight="bold", color=NAVY)
    ax.add_patch(plt.Rectangle((-0.45, 0), 0.9, 3, fc="#e8d1b9", ec="black", lw=1))  # anal canal
    ax.add_patch(plt.Rectangle((-0.6, 3), 1.2, 12, fc="#f6e7d8", ec="black", lw=1))  # rectum
    ax.add_patch(plt.Rectangle((-0.6, 7), 0.75, 5, fc=RED, ec="darkred", lw=1, alpha=0.9))  # semicircumferential tumour
    for cm in range(0, 16, 3):
        ax.plot([-0.85, -0.7], [cm, cm], color="black", lw=1)
        ax.text(-0.95, cm, str(cm), ha="right", va="center", fontsize=8.5)
    ax.plot([-0.78, -0.78], [0, 15], color="black", lw=0.8)
    ax.text(0.7, 1.5, "anal canal", fontsize=8, va="center")
    ax.plot([0.45, 0.8], [3, 3], color=GREY, lw=1, ls="--")
    ax.text(0.7, 3.5, "anorectal\njunction 3 cm", fontsize=8, va="bottom", color=GREY)
    ax.annotate("tumour\n7-12 cm", (0.1, 9.5), xytext=(0.75, 8.7), fontsize=9, color=RED, fontweight="bold",
                arrowprops={"arrowstyle": "->", "color": RED})
    ax.text(0.7, 13.2, "colon clear to\ncaecum; 8 mm\nsigmoid adenoma\nremoved", fontsize=7.5, color=GREY, va="bottom")
    right = body(fig, (0.42, 0.06, 0.55, 0.81))
    right.text(0.0, 0.99, "Colonoscopy (Jan 2025): semicircumferential, ulcerated,\npassable tumour; lower edge tattooed.\n"
               "Biopsy: moderately differentiated adenocarcinoma.", fontsize=9.5, va="top", linespacing=1.4)
    rows = [
        ("Haemoglobin", "10.8 g/dL", "Low"),
        ("Ferritin", "9 ug/L", "Low"),
        ("CEA", "8.6 ng/mL (< 5.0)", "Raised"),
        ("eGFR", "82 mL/min", "Normal"),
        ("Liver tests", "Within normal limits", "Normal"),
        ("DPYD genotype", "No variant detected", "Normal"),
    ]
    colour = {"Low": "#fdebd0", "Raised": "#f8d7d3", "Normal": "#dff0e3"}
    table(right, ("Test (Dec 2024)", "Value", "Call"), rows, (0.01, 0.42, 0.8), top=0.74, row_h=0.1, size=10,
          highlight=lambda r: colour.get(r[2]))
    save(fig, out)


def colorectal_mri(out: Path) -> None:
    fig = slide("Rectal MRI (3T, high-resolution T2)", "Jan 2025")
    ax = fig.add_axes((0.02, 0.06, 0.46, 0.8))
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.3, 1.3)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.text(0, 1.22, "Axial schematic, mid rectum", ha="center", fontsize=10, fontweight="bold", color=NAVY)
    ax.add_patch(Ellipse((0, 0), 1.9, 1.75, fc="#fbf3d5", ec=NAVY, lw=1.5, ls="--"))  # mesorectal fat inside the fascia
    ax.add_patch(Circle((0, 0), 0.42, fc="#e8d1b9", ec="black", lw=1.2))  # rectal wall
    ax.add_patch(Circle((0, 0), 0.2, fc="white", ec="#8c6d4f", lw=0.8))  # lumen
    # radiological convention: the patient's left is on the viewer's right; the tumour spans the left half
    tumour = [(0.2 * np.cos(a), 0.2 * np.sin(a)) for a in np.linspace(np.deg2rad(80), np.deg2rad(-80), 20)]
    tumour += [(0.55, -0.35), (0.86, -0.18), (0.935, 0.0), (0.86, 0.18), (0.55, 0.35)]
    ax.add_patch(Polygon(tumour, fc=RED, ec="darkred", alpha=0.85))
    ax.add_patch(Circle((0, 0), 0.2, fc="white", ec="#8c6d4f", lw=0.8))  # lumen over the tumour's inner edge
    ax.annotate("1 mm to fascia\n(MRF involved)", (0.94, 0.0), xytext=(0.55, -1.22), fontsize=8.5, color=RED, fontweight="bold",
                arrowprops={"arrowstyle": "->", "color": RED})
    ax.annotate("extramural spread 8 mm (T3c)", (0.7, 0.25), xytext=(-0.2, 1.05), fontsize=8.5, color=RED,
                arrowprops={"arrowstyle": "->", "color": RED})
    ax.plot([0.3, 0.45, 0.62], [-0.35, -0.52, -0.62], color="#5b2c6f", lw=3)  # extramural vein with tumour signal
    ax.text(0.66, -0.74, "EMVI 4", fontsize=8.5, color="#5b2c6f", fontweight="bold")
    for x, y in [(-0.55, 0.45), (-0.2, -0.65), (0.35, 0.62)]:
        ax.add_patch(Circle((x, y), 0.07, fc=ORANGE, ec="black", lw=0.6))
    ax.text(-1.3, -0.85, "suspicious\nmesorectal\nnodes (3)", fontsize=8, color=ORANGE, fontweight="bold")
    ax.add_patch(Circle((1.15, 0.55), 0.045, fc="#bdc3c7", ec="black", lw=0.6))
    ax.text(1.05, 0.68, "L obturator\n4 mm", fontsize=7, color=GREY, ha="center", va="bottom")
    ax.text(0, 0.7, "anterior", ha="center", fontsize=7.5, color=GREY)
    ax.text(-1.3, 0.95, "R", fontsize=13, fontweight="bold")
    ax.text(1.2, 0.95, "L", fontsize=13, fontweight="bold")
    ax.text(-1.0, -0.05, "MRF", fontsize=8, color=NAVY, ha="right")
    right = body(fig, (0.5, 0.06, 0.47, 0.8))
    text_box(right, 0, 0.02, 1, 0.96, "Findings", [
        "Mid rectum, tumour length 5 cm",
        "Lower edge 7 cm from anal verge,",
        "    4 cm above the anorectal junction",
        "Extramural spread 8 mm: T3c",
        "Closest to mesorectal fascia 1 mm,",
        "    left lateral wall: MRF involved",
        "Extramural venous invasion: mrEMVI 4",
        "3 mesorectal nodes 5-8 mm, irregular,",
        "    mixed signal: N1b; no tumour deposits",
        "L obturator node 4 mm: not suspicious",
        "Sphincters and levators clear",
    ], size=9.8)
    save(fig, out)


def colorectal_pathology(out: Path) -> None:
    fig = slide("Pathology and biomarkers", "Endoscopic biopsies, Jan 2025")
    ax = body(fig, (0.03, 0.06, 0.94, 0.81))
    rows = [
        ("Histology", "Adenocarcinoma, moderately differentiated", "-"),
        ("MLH1 / PMS2 (IHC)", "Nuclear expression retained", "Retained"),
        ("MSH2 / MSH6 (IHC)", "Nuclear expression retained", "Retained"),
        ("MMR status", "Mismatch-repair proficient (pMMR)", "pMMR"),
        ("MSI (PCR)", "Microsatellite stable", "MSS"),
        ("KRAS", "G12D (exon 2)", "Mutated"),
        ("NRAS", "No mutation (exons 2, 3, 4)", "Wild-type"),
        ("BRAF", "No V600E", "Wild-type"),
        ("HER2", "Not amplified", "Negative"),
    ]
    colour = {"Mutated": "#fdebd0", "Wild-type": "#dff0e3", "Negative": "#dff0e3", "Retained": "#dff0e3"}
    table(ax, ("Test", "Result", "Call"), rows, (0.01, 0.27, 0.82), top=0.95, row_h=0.1, size=10,
          highlight=lambda r: colour.get(r[2]))
    save(fig, out)


def colorectal_staging(out: Path) -> None:
    fig = slide("Staging and risk summary", "Tumor board, Feb 2025")
    ax = body(fig)
    cards = [
        ("Clinical stage", ["cT3c N1b M0 (AJCC 8th stage IIIB)", "Mid rectum, 7-12 cm from verge", "CT chest-abdomen-pelvis: no",
                            "    metastases", "Obturator node not suspicious"]),
        ("High-risk features", ["Mesorectal fascia involved (1 mm)", "EMVI positive (mrEMVI 4)", "3 suspicious mesorectal nodes",
                                "CEA 8.6 ng/mL", "pMMR / MSS; KRAS G12D"]),
        ("Fitness", ["ECOG 0", "Hypertension, hyperlipidaemia", "BMI 29; ex-smoker 20 pack-years",
                     "Hb 10.8 g/dL, ferritin 9", "eGFR 82; DPYD no variant"]),
        ("Patient", ["58 y, bus driver, married", "Accepts a temporary stoma", "Wants to avoid a permanent stoma",
                     "Interested in organ preservation", "Worried about time off driving"]),
    ]
    for i, (heading, lines) in enumerate(cards):
        x, y = (i % 2) * 0.52, 0.5 if i < 2 else 0.0
        text_box(ax, x, y + 0.03, 0.48, 0.43, heading, lines, size=10.5)
    save(fig, out)


# ---------------------------------------------------------------- pancreas case

MARKERS = [  # (date, CA 19-9 U/mL, bilirubin mg/dL)
    (date(2024, 11, 12), 890, 12.4),
    (date(2024, 12, 2), 520, 3.1),
    (date(2024, 12, 20), 410, 1.4),
    (date(2025, 1, 14), 430, 1.1),
]


def pancreas_markers(out: Path) -> None:
    fig = slide("CA 19-9 and bilirubin", "Nov 2024 - Jan 2025")
    ax = fig.add_axes((0.1, 0.12, 0.78, 0.66))
    days, ca, bili = zip(*MARKERS)
    ax.plot(days, ca, "-o", color=NAVY, lw=2, ms=6, label="CA 19-9 (U/mL)")
    for d, v in zip(days, ca):
        ax.annotate(f"{v}", (d, v), textcoords="offset points", xytext=(0, 9), ha="center", fontsize=10, fontweight="bold", color=NAVY)
    ax.set_ylim(0, 1050)
    ax.set_ylabel("CA 19-9 (U/mL)", color=NAVY)
    ax.axhline(37, color=GREEN, lw=1, ls=":")
    ax.text(date(2024, 11, 2), 45, "CA 19-9 normal < 37", color=GREEN, fontsize=8, va="bottom")
    twin = ax.twinx()
    twin.plot(days, bili, "--s", color=ORANGE, lw=2, ms=6, label="Bilirubin (mg/dL)")
    for d, v in zip(days, bili):
        twin.annotate(f"{v:.1f}", (d, v), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=9.5, fontweight="bold", color=ORANGE)
    twin.set_ylim(0, 20)
    twin.set_ylabel("Bilirubin (mg/dL)", color=ORANGE)
    ax.axvline(date(2024, 11, 15), color=RED, ls="--", lw=1)
    ax.text(date(2024, 11, 17), 1000, "ERCP: covered metal stent\nEUS biopsy: adenocarcinoma", fontsize=8.5, color=RED, va="top")
    ax.set_xlim(date(2024, 11, 1), date(2025, 1, 25))
    ax.xaxis.set_major_locator(mdates.DayLocator(bymonthday=1))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%d %b %Y"))
    ax.grid(alpha=0.3)
    for axis in (ax, twin):
        axis.spines[["top"]].set_visible(False)
    lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(lines, [line.get_label() for line in lines], loc="upper right", fontsize=9, frameon=False)
    fig.text(0.1, 0.83, "CA 19-9 read against bilirubin: 410 U/mL once no longer jaundiced (20 Dec 2024)", fontsize=10, color=NAVY)
    save(fig, out)


def pancreas_ct(out: Path) -> None:
    fig = slide("Pancreas-protocol CT: vessels", "Nov 2024; liver MRI Dec 2024")
    ax = fig.add_axes((0.02, 0.06, 0.4, 0.8))
    ax.set_xlim(-1.2, 1.2)
    ax.set_ylim(-1.2, 1.25)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.text(0, 1.17, "Axial schematic at the head", ha="center", fontsize=10, fontweight="bold", color=NAVY)
    ax.add_patch(Polygon([(-1.0, 0.05), (-0.7, 0.55), (-0.1, 0.6), (0.5, 0.55), (1.05, 0.75), (1.1, 0.5),
                          (0.5, 0.25), (-0.05, 0.2), (-0.3, -0.35), (-0.85, -0.45)], fc="#f6e7d8", ec="black", lw=1.2))  # pancreas
    ax.add_patch(Ellipse((-0.58, 0.05), 0.62, 0.55, fc=RED, ec="darkred", alpha=0.85))  # head mass
    ax.text(-0.62, 0.0, "2.8 cm", ha="center", fontsize=8.5, color="white", fontweight="bold")
    # vessels: the patient's right is on the viewer's left
    ax.add_patch(Circle((-0.2, 0.02), 0.12, fc="#5dade2", ec="black", lw=0.8, zorder=3))  # SMV
    ax.text(-0.2, 0.02, "SMV", ha="center", va="center", fontsize=6.5, fontweight="bold", zorder=4)
    ax.add_patch(Wedge((-0.2, 0.02), 0.19, 80, 280, width=0.07, fc=RED, ec="darkred", lw=0.6, zorder=3))  # 200 degrees of contact
    ax.add_patch(Circle((0.12, 0.0), 0.08, fc="#f1948a", ec="black", lw=0.8, zorder=3))  # SMA
    ax.text(0.12, -0.14, "SMA", ha="center", va="top", fontsize=7, fontweight="bold")
    ax.add_patch(Circle((0.12, 0.0), 0.15, fc="none", ec="#f4d03f", lw=3, zorder=2))  # preserved fat plane
    ax.add_patch(Circle((0.1, -0.6), 0.17, fc="#f1948a", ec="black", lw=0.8))  # aorta
    ax.text(0.1, -0.6, "Ao", ha="center", va="center", fontsize=7, fontweight="bold")
    ax.add_patch(Ellipse((-0.35, -0.65), 0.36, 0.22, fc="#5dade2", ec="black", lw=0.8))  # IVC
    ax.text(-0.35, -0.65, "IVC", ha="center", va="center", fontsize=7, fontweight="bold")
    ax.add_patch(Circle((-0.75, 0.35), 0.08, fc="#fbf3d5", ec="#8c6d4f", lw=1))  # common bile duct with stent
    ax.text(-0.95, 0.62, "CBD 14 mm\n(stented)", fontsize=7.5, color="#8c6d4f", ha="center")
    ax.annotate("SMV contact 200 deg\nover 2.0 cm", (-0.3, 0.1), xytext=(-1.15, -1.15), fontsize=8.5, color=RED,
                fontweight="bold", arrowprops={"arrowstyle": "->", "color": RED})
    ax.text(0.35, -0.95, "fat plane\naround SMA", fontsize=7.5, color="#b7950b")
    ax.text(-1.15, 1.0, "R", fontsize=13, fontweight="bold")
    ax.text(1.05, 1.0, "L", fontsize=13, fontweight="bold")
    right = body(fig, (0.44, 0.06, 0.54, 0.81))
    rows = [
        ("SMV", "200 deg, 2.0 cm", "narrowed, no thrombus"),
        ("Portal vein", "none", "-"),
        ("SMA", "none", "fat plane preserved"),
        ("Common hepatic a.", "none", "-"),
        ("Coeliac axis", "none", "-"),
        ("Arterial variant", "none", "-"),
    ]
    bottom = table(right, ("Vessel", "Tumour contact", "Detail"), rows, (0.01, 0.33, 0.63), top=0.96, row_h=0.085, size=9.5,
                   highlight=lambda r: "#f8d7d3" if r[0] == "SMV" else None)
    text_box(right, 0, 0.0, 1, bottom - 0.03, "Other findings", [
        "Head mass 2.8 x 2.5 cm; double-duct sign (CBD 14, PD 5 mm)",
        "Vein reconstructable: adequate length above and below",
        "9 mm peripancreatic node: indeterminate",
        "Liver MRI (DWI), chest CT: no metastases; no ascites",
        "NCCN: borderline resectable (venous)",
    ], size=9.5)
    save(fig, out)


def pancreas_pathology(out: Path) -> None:
    fig = slide("Pathology and genetics", "EUS-guided 22G biopsy, Nov 2024")
    ax = body(fig, (0.03, 0.06, 0.94, 0.81))
    rows = [
        ("Histology", "Adenocarcinoma, moderately differentiated", "-"),
        ("EUS", "2.9 cm hypoechoic mass, pancreatic head", "-"),
        ("Germline panel", "BRCA2 pathogenic frameshift variant", "Pathogenic"),
        ("Tumour NGS: KRAS", "G12D", "Mutated"),
        ("Tumour NGS: TP53", "Missense mutation", "Mutated"),
        ("MSI / MMR", "Microsatellite stable", "MSS"),
        ("TMB", "3 mutations/Mb", "Low"),
        ("Family history", "Sister: breast cancer at 45; father: prostate at 70", "-"),
    ]
    colour = {"Pathogenic": "#f8d7d3", "Mutated": "#fdebd0", "MSS": "#dff0e3", "Low": "#dff0e3"}
    bottom = table(ax, ("Test", "Result", "Call"), rows, (0.01, 0.24, 0.82), top=0.95, row_h=0.098, size=10,
                   highlight=lambda r: colour.get(r[2]))
    ax.text(0.01, bottom - 0.05, "Germline testing offered as to every patient with pancreatic cancer; daughter (38) asks about testing.",
            fontsize=9.5, color=NAVY, va="top")
    save(fig, out)


def pancreas_staging(out: Path) -> None:
    fig = slide("Staging and fitness summary", "Tumor board, Jan 2025")
    ax = body(fig)
    cards = [
        ("Clinical stage", ["cT2 cN0 M0 (AJCC 8th stage IB)", "Head mass 2.8 cm", "9 mm node: indeterminate",
                            "Liver MRI and chest CT clear", "No ascites"]),
        ("Resectability (NCCN)", ["Borderline resectable: venous", "SMV 200 deg over 2.0 cm", "Vein reconstructable",
                                  "SMA, CHA, coeliac: no contact", "Portal vein: no contact"]),
        ("Markers and drainage", ["CA 19-9 890 -> 410 U/mL", "    (bilirubin 12.4 -> 1.4 mg/dL)", "Jan 2025: 430 U/mL, bili 1.1",
                                  "Covered metal CBD stent", "Germline BRCA2 pathogenic"]),
        ("Patient", ["64 y, ECOG 1 (fatigue)", "Weight 68 -> 62 kg (9%)", "New diabetes, HbA1c 7.4%",
                     "Albumin 3.6 g/dL; on enzymes", "Wants surgery if possible"]),
    ]
    for i, (heading, lines) in enumerate(cards):
        x, y = (i % 2) * 0.52, 0.5 if i < 2 else 0.0
        text_box(ax, x, y + 0.03, 0.48, 0.43, heading, lines, size=10.5)
    save(fig, out)


# ---------------------------------------------------------------- all cases

CASES = {  # case folder -> [(slide file, renderer)]
    "prostate": [("01_psa_trend.png", prostate_psa), ("02_mri_findings.png", prostate_mri),
                 ("03_biopsy_cores.png", prostate_pathology), ("04_staging_summary.png", prostate_staging)],
    "lung": [("01_ct_pet_nodes.png", lung_ct_pet), ("02_biomarkers.png", lung_biomarkers),
             ("03_pulmonary_function.png", lung_pft)],
    "breast": [("01_breast_imaging.png", breast_imaging), ("02_pathology_receptors.png", breast_pathology),
               ("03_staging_workup.png", breast_staging)],
    "colorectal": [("01_endoscopy_labs.png", colorectal_endoscopy), ("02_mri_staging.png", colorectal_mri),
                   ("03_pathology_biomarkers.png", colorectal_pathology), ("04_staging_summary.png", colorectal_staging)],
    "pancreas": [("01_ca19_9_bilirubin.png", pancreas_markers), ("02_ct_vessels.png", pancreas_ct),
                 ("03_pathology_genetics.png", pancreas_pathology), ("04_staging_summary.png", pancreas_staging)],
}


def render(cases: list[str] | None = None, out_dir: Path = HERE) -> list[Path]:
    """Render the slides of `cases` (all when None) under out_dir/CASE/slides/; returns the files written."""
    written = []
    for name in cases or list(CASES):
        for filename, renderer in CASES[name]:
            path = out_dir / name / "slides" / filename
            renderer(path)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Render the example cases' slide images.")
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"cases to render (default all: {', '.join(CASES)})")
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write CASE/slides/*.png under (default: examples/)")
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    render(args.cases or None, args.out)


if __name__ == "__main__":
    main()
