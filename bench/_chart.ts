/**
 * An SVG bar chart of ratios: one group of horizontal bars per workload, one
 * bar per implementation, and a line at 1.0 (the protocol floor).
 *
 * @module
 */

/** One bar: a ratio, or null with a note (failed, n/a). */
export interface Bar {
  readonly series: string;
  readonly value: number | null;
  readonly note?: string;
}

/** A group of bars under one label. */
export interface Group {
  readonly label: string;
  readonly bars: readonly Bar[];
}

/** A series: its name in the legend and its colour. */
export interface Series {
  readonly id: string;
  readonly label: string;
  readonly color: string;
}

/** What the chart shows. */
export interface Chart {
  readonly title: string;
  readonly subtitle: string;
  readonly footer: readonly string[];
  readonly series: readonly Series[];
  readonly groups: readonly Group[];
  /** Where the reference line goes. */
  readonly reference: { value: number; label: string };
}

const escape = (s: string): string =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

/** Renders the chart as a standalone SVG document. */
export function renderChart(chart: Chart): string {
  const width = 760;
  const left = 170;
  const right = 60;
  const barHeight = 13;
  const barGap = 3;
  const groupGap = 14;
  const top = 78 + Math.ceil(chart.series.length / 3) * 18;
  const plot = width - left - right;
  const values = chart.groups.flatMap((g) => g.bars.map((b) => b.value ?? 0));
  const max = Math.max(chart.reference.value * 1.25, ...values.map((v) => v * 1.08));
  const x = (v: number) => left + (v / max) * plot;
  const color = new Map(chart.series.map((s) => [s.id, s]));
  const out: string[] = [];
  let y = top;
  for (const group of chart.groups) {
    out.push(
      `<text x="${left - 8}" y="${y + 11}" text-anchor="end" font-weight="bold">${
        escape(group.label)
      }</text>`,
    );
    y += 16;
    for (const bar of group.bars) {
      const series = color.get(bar.series);
      const name = series?.label ?? bar.series;
      out.push(
        `<text x="${left - 8}" y="${y + barHeight - 3}" text-anchor="end" fill="#444">${
          escape(name)
        }</text>`,
      );
      if (bar.value === null) {
        out.push(
          `<text x="${left + 4}" y="${y + barHeight - 3}" fill="#999" font-style="italic">${
            escape(bar.note ?? "n/a")
          }</text>`,
        );
      } else {
        const w = Math.max(1, x(bar.value) - left);
        out.push(
          `<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${barHeight}" fill="${
            series?.color ?? "#888"
          }"><title>${escape(name)}: ${bar.value.toFixed(3)}×</title></rect>`,
          `<text x="${(left + w + 4).toFixed(1)}" y="${y + barHeight - 3}">${
            bar.value.toFixed(2)
          }×</text>`,
        );
      }
      y += barHeight + barGap;
    }
    y += groupGap;
  }
  const bottom = y;
  const ref = x(chart.reference.value);
  const ticks: string[] = [];
  for (let t = 0; t <= max + 1e-9; t += max > 3 ? 1 : 0.25) {
    ticks.push(
      `<line x1="${x(t)}" y1="${top - 4}" x2="${x(t)}" y2="${bottom - groupGap}" stroke="#eee"/>`,
      `<text x="${x(t)}" y="${bottom - groupGap + 12}" text-anchor="middle" fill="#888">${
        t.toFixed(2)
      }</text>`,
    );
  }
  const legend = chart.series.map((s, i) => {
    const lx = 20 + (i % 3) * 245;
    const ly = 62 + Math.floor(i / 3) * 18;
    return `<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${s.color}"/>` +
      `<text x="${lx + 18}" y="${ly}">${escape(s.label)}</text>`;
  });
  const footerY = bottom + 14;
  const footer = chart.footer.map((line, i) =>
    `<text x="20" y="${footerY + i * 15}" fill="#666" font-size="11">${escape(line)}</text>`
  );
  const height = footerY + chart.footer.length * 15 + 6;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
    `viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, ` +
    `Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="20" y="22" font-size="16" font-weight="bold">${escape(chart.title)}</text>`,
    `<text x="20" y="38" fill="#666">${escape(chart.subtitle)}</text>`,
    ...legend,
    ...ticks,
    ...out,
    `<line x1="${ref}" y1="${top - 6}" x2="${ref}" y2="${bottom - groupGap}" stroke="#c00" ` +
    `stroke-dasharray="4 3"/>`,
    `<text x="${ref + 3}" y="${top - 8}" fill="#c00" font-size="11">${
      escape(chart.reference.label)
    }</text>`,
    ...footer,
    `</svg>`,
    "",
  ].join("\n");
}
