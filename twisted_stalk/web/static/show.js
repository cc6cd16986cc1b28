// twisted-stalk web console: how numbers, bodies and rates are shown.
// Plain functions used by console.js (loaded first). Nothing here writes
// markup: text goes in with textContent, SVG is built node by node.
"use strict";

function duration(seconds) {
  seconds = Math.max(0, Math.floor(seconds));
  if (seconds < 60) return seconds + "s";
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600);
  const m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  return m + "m " + s + "s";
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function num(n) { return (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en"); }

// "1 producer", "2 producers", "1 match", "3 matches".
function plural(n, one, many) {
  return `${num(n)} ${Number(n) === 1 ? one : (many || one + "s")}`;
}

// ------------------------------------------------------------------ bodies

// A JSON object or array re-indented, its tokens kept as written (a long
// number is not rounded through a float); null when the text is not one.
function prettyJson(text) {
  const src = text.trim();
  if (!/^[[{]/.test(src)) return null;
  try { JSON.parse(src); } catch (e) { return null; }
  let out = "", depth = 0, i = 0;
  const newline = () => "\n" + "  ".repeat(depth);
  while (i < src.length) {
    const c = src[i];
    if (c === "\"") {
      let j = i + 1;
      while (src[j] !== "\"") j += src[j] === "\\" ? 2 : 1;
      out += src.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    if (c === "{" || c === "[") {
      let j = i + 1;
      while (" \t\r\n".includes(src[j])) j++;
      if (src[j] === (c === "{" ? "}" : "]")) { out += c + src[j]; i = j + 1; continue; }
      depth++;
      out += c + newline();
    } else if (c === "}" || c === "]") {
      depth--;
      out += newline() + c;
    } else if (c === ",") {
      out += "," + newline();
    } else if (c === ":") {
      out += ": ";
    } else if (!" \t\r\n".includes(c)) {
      out += c;
    }
    i++;
  }
  return out;
}

// "48 65 6c" (the API's hex) as `hexdump -C` shows it: offset, 16 bytes in
// two groups of 8, and the printable ASCII ("." for the rest).
function hexDump(hex) {
  const all = hex ? hex.split(" ") : [];
  const lines = [];
  for (let i = 0; i < all.length; i += 16) {
    const row = all.slice(i, i + 16);
    const left = row.slice(0, 8).join(" "), right = row.slice(8).join(" ");
    const ascii = row.map((b) => {
      const n = parseInt(b, 16);
      return n >= 0x20 && n < 0x7f ? String.fromCharCode(n) : ".";
    }).join("");
    lines.push(i.toString(16).padStart(8, "0") + "  " +
      (left + (right ? "  " + right : "")).padEnd(48) + "  |" + ascii + "|");
  }
  return lines.join("\n");
}

// ------------------------------------------------------------------ charts

const SVG = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// The smallest of 1, 2, 2.5, 5 times a power of ten at or above v (1 at least).
function niceTop(v) {
  if (v <= 1) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function tickText(v, short) {
  if (short && v >= 1e6) return v / 1e6 + "M";
  if (short && v >= 1e3) return v / 1e3 + "k";
  return Number.isInteger(v) ? num(v) : v.toFixed(1);
}

// A line chart of rates: one polyline per series, a y-axis from 0 to a round
// top with its unit, and (unless compact) the time span under it.
// options: {width, height, unit ("jobs/s"), interval (s per sample), compact}
function rateChart(series, options) {
  const { width, height, unit, interval, compact } = options;
  const left = compact ? 34 : 46, right = compact ? 2 : 10;
  const top = compact ? 5 : 18, bottom = compact ? 4 : 20;
  const plotW = width - left - right, plotH = height - top - bottom;
  let peak = 0, samples = 0;
  for (const s of series) {
    samples = Math.max(samples, s.values.length);
    for (const v of s.values) peak = Math.max(peak, v);
  }
  const ymax = niceTop(peak);
  const y = (v) => (top + plotH - v / ymax * plotH).toFixed(1);
  const svg = svgEl("svg", { class: "chart" + (compact ? " compact" : ""), width, height,
    viewBox: `0 0 ${width} ${height}`, role: "img", "data-ymax": ymax });
  for (const t of compact ? [0, ymax] : [0, ymax / 2, ymax]) {
    svg.append(svgEl("line", { class: "grid", x1: left, x2: width - right, y1: y(t), y2: y(t) }),
      svgEl("text", { class: "tick", x: left - 4, y: Number(y(t)) + 3.5, "text-anchor": "end" },
        tickText(t, compact) + (compact && t ? "/s" : "")));
  }
  svg.append(svgEl("line", { class: "axis", x1: left, x2: left, y1: top, y2: top + plotH }),
    svgEl("line", { class: "axis", x1: left, x2: width - right, y1: top + plotH,
      y2: top + plotH }));
  if (!compact) {
    svg.append(svgEl("text", { class: "unit", x: 2, y: 10 }, unit));
    if (samples > 1) {
      svg.append(
        svgEl("text", { class: "tick", x: left, y: height - 5 },
          "−" + duration((samples - 1) * interval)),
        svgEl("text", { class: "tick", x: width - right, y: height - 5, "text-anchor": "end" },
          "now"));
    }
  }
  if (samples < 2) {
    svg.append(svgEl("text", { class: "tick empty", x: left + plotW / 2, y: top + plotH / 2 + 4,
      "text-anchor": "middle" }, compact ? "…" : "collecting samples…"));
  }
  for (const s of series) {
    if (s.values.length < 2) continue;
    const step = plotW / (s.values.length - 1);
    svg.append(svgEl("polyline", { class: "s-" + s.name,
      points: s.values.map((v, i) => `${(left + i * step).toFixed(1)},${y(v)}`).join(" ") }));
  }
  svg.append(svgEl("title", {}, series.map((s) =>
    `${s.name}: ${s.values.length ? s.values[s.values.length - 1] : 0} ${unit}`).join(", ") +
    ` (peak ${peak})`));
  return svg;
}
