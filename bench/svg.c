/* The charts of `lkvm bench net` as SVG: one panel per test and size, lkvm's and QEMU's bars side by side per TX strategy, the floor as a line; lkvm's traced round trips as stacked bars by stage. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lkvm/bench.h"

/*
 * Written by hand rather than through a plotting tool: what makes the chart readable (two
 * colours by VMM, bars grouped by strategy, a floor line per panel, horizontal labels, the
 * value on each bar) is simple to lay out, and the elements carry their figures in data-*
 * attributes so that tests/integration/test-bench.sh can check the chart against the JSON.
 */

#define PANEL_W 600 /* at least; wider with more groups and series */
#define BAR_W 46
#define GROUP_GAP 30
#define PANEL_H 320
#define PAD_L 64  /* the y axis' labels */
#define PAD_R 92  /* the floor's label, right of its line */
#define PAD_T 34  /* the panel's title */
#define PAD_B 44  /* the groups' labels, two lines */
#define HEAD_H 78 /* the chart's title and legend */
#define MAX_GROUPS 12
#define MAX_BARS 4
#define STAGE_HEAD_H 64	  /* the breakdown's title and its stages' legend */
#define STAGE_ROW_H 26	  /* one traced rr row's stacked bar */
#define STAGE_LABEL_W 150 /* its mode and size, left of the bar */

/* The bars' series, in the order they stand in a group: one colour each. */
enum series { S_LKVM, S_LKVM_NOBATCH, S_QEMU, S_NR };

static const struct {
	const char *label, *colour;
} series_info[] = {
	[S_LKVM] = { "lkvm", "#1f5fa8" },
	[S_LKVM_NOBATCH] = { "lkvm, batch=off", "#8fb8e3" },
	[S_QEMU] = { "QEMU", "#e8731c" },
};
_Static_assert(ARRAY_SIZE(series_info) == S_NR, "series_info must name every series");

static const char *const tests[] = { "tx", "rx", "rr" };

/* A white outline under a label, so that a line behind it does not cross it out. */
#define HALO "stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\""

struct chart {
	FILE *f;
	const struct bench_row *rows;
	int n;
	bool cpu; /* host CPU per packet, else rates and RTT */
	int pw;	  /* a panel's width */
};

static enum series series_of(const struct bench_row *r)
{
	if (r->qemu)
		return S_QEMU;
	return r->batch && !strcmp(r->batch, "off") ? S_LKVM_NOBATCH : S_LKVM;
}

/* The figure a bar shows: ns of host CPU per packet, or Kpps (tx, rx) or the RTT median (rr). */
static double value_of(const struct chart *c, const struct bench_row *r)
{
	if (c->cpu)
		return r->host_ns;
	return strcmp(r->test, "rr") ? r->pps / 1000 : r->rtt_med_us;
}

static const char *unit_of(const struct chart *c, const char *test)
{
	if (c->cpu)
		return "host CPU ns per packet (lower is better)";
	return strcmp(test, "rr") ? "K packets/s (higher is better)"
				  : "RTT median, us (lower is better)";
}

static bool in_panel(const struct bench_row *r, const char *test, unsigned size)
{
	return !r->error[0] && !strcmp(r->test, test) && r->size == size;
}

static const struct bench_row *panel_floor(const struct chart *c, const char *test, unsigned size)
{
	for (int i = 0; i < c->n; i++)
		if (c->rows[i].floor && in_panel(&c->rows[i], test, size) &&
		    c->rows[i].qemu == false)
			return &c->rows[i];
	return NULL;
}

/* The y axis' step (1, 2, 2.5 or 5 times a power of ten) that covers v in at most 6 steps,
 * and its top, a whole number of steps. */
static double nice_top(double v, double *step)
{
	static const double m[] = { 1, 2, 2.5, 5 };
	double p = 1, n;

	v = v > 0 ? v : 1;
	while (p * 10 <= v)
		p *= 10;
	while (p > v)
		p /= 10; /* the power of ten at or below v, without libm */
	p /= 10;
	for (;; p *= 10)
		for (size_t i = 0; i < ARRAY_SIZE(m); i++) {
			*step = m[i] * p;
			n = (double)(long long)(v / *step);
			if (n * *step < v)
				n++;
			if (n <= 6)
				return n * *step;
		}
}

/* A figure in at most four or five characters: 0, 3.25, 48.7, 1417, 14.7k, 1883k. */
static void fmt_value(char *buf, size_t len, double v)
{
	if (v == 0)
		snprintf(buf, len, "0");
	else if (v >= 100000)
		snprintf(buf, len, "%.0fk", v / 1000);
	else if (v >= 10000)
		snprintf(buf, len, "%.1fk", v / 1000);
	else
		snprintf(buf, len, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v);
}

/* The groups of a panel, in the order their first bar comes in the rows. */
static int panel_groups(const struct chart *c, const char *test, unsigned size, const char **g)
{
	int ng = 0;

	for (int i = 0; i < c->n; i++) {
		const struct bench_row *r = &c->rows[i];
		int j;

		if (r->floor || !r->group || !in_panel(r, test, size) || isnan(value_of(c, r)))
			continue;
		for (j = 0; j < ng && strcmp(g[j], r->group); j++)
			;
		if (j == ng && ng < MAX_GROUPS)
			g[ng++] = r->group;
	}
	return ng;
}

/* A group's label under the axis, split after its comma onto two lines. */
static void group_label(FILE *f, double x, double y, const char *g)
{
	const char *comma = strchr(g, ',');

	fprintf(f, "<text class=\"group\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x, y);
	if (comma)
		fprintf(f, "<tspan x=\"%.1f\">%.*s</tspan><tspan x=\"%.1f\" dy=\"13\">%s</tspan>",
			x, (int)(comma - g), g, x, comma + 2);
	else
		fputs(g, f);
	fputs("</text>\n", f);
}

/* One group's bars from x0 over width w; y maps a value to the panel's y. */
static void group_bars(const struct chart *c, const char *test, unsigned size, const char *g,
		       double x0, double w, double base, double scale)
{
	const struct bench_row *bars[MAX_BARS];
	int nb = 0;

	for (int s = 0; s < S_NR; s++)
		for (int i = 0; i < c->n && nb < MAX_BARS; i++) {
			const struct bench_row *r = &c->rows[i];

			if (!r->floor && r->group && !strcmp(r->group, g) &&
			    in_panel(r, test, size) && series_of(r) == (enum series)s &&
			    !isnan(value_of(c, r)))
				bars[nb++] = r;
		}
	double bw = MIN((w - GROUP_GAP) / MAX(nb, 1), BAR_W), x = x0 + (w - bw * nb) / 2;

	for (int i = 0; i < nb; i++, x += bw) {
		const struct bench_row *r = bars[i];
		double v = value_of(c, r), h = v * scale;
		char val[32];

		fmt_value(val, sizeof(val), v);
		fprintf(c->f,
			"<rect class=\"bar\" data-mode=\"%s\" data-vmm=\"%s\" data-batch=\"%s\" "
			"data-value=\"%.3f\" "
			"x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
			r->mode, r->qemu ? "qemu" : "lkvm", r->batch ? r->batch : "", v, x + 1,
			base - h, bw - 2, h, series_info[series_of(r)].colour);
		fprintf(c->f,
			"<text class=\"value\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" " HALO
			">%s%s</text>\n",
			x + bw / 2, base - h - 4, val, r->busy ? "*" : "");
	}
}

/* The y axis' grid and labels from 0 to top, and the floor's line. */
static void panel_axis(const struct chart *c, double px, double py, double top, double step,
		       const struct bench_row *fl, double fv)
{
	double base = py + PANEL_H - PAD_B, scale = (PANEL_H - PAD_T - PAD_B) / top;
	char val[32];

	for (double t = 0; t <= top * 1.0001; t += step) {
		/* whole steps: no decimals on the axis */
		if (step >= 1 && t < 10000)
			snprintf(val, sizeof(val), "%.0f", t);
		else if (step >= 1000)
			snprintf(val, sizeof(val), "%.0fk", t / 1000);
		else
			fmt_value(val, sizeof(val), t);
		fprintf(c->f,
			"<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
			(int)px + PAD_L, base - t * scale, (int)px + c->pw - PAD_R,
			base - t * scale);
		fprintf(c->f,
			"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
			px + PAD_L - 6, base - t * scale + 4, val);
	}
	fprintf(c->f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#444\"/>\n",
		(int)px + PAD_L, base, (int)px + c->pw - PAD_R, base);
	if (!fl)
		return;
	fmt_value(val, sizeof(val), fv);
	fprintf(c->f,
		"<line class=\"floor\" data-value=\"%.3f\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" "
		"y2=\"%.1f\" "
		"stroke=\"#c0392b\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n",
		fv, (int)px + PAD_L, base - fv * scale, (int)px + c->pw - PAD_R, base - fv * scale);
	fprintf(c->f,
		"<text class=\"floor-label\" x=\"%d\" y=\"%.1f\" fill=\"#c0392b\" " HALO
		"><tspan>%s</tspan>"
		"<tspan x=\"%d\" dy=\"13\">%s%s</tspan></text>\n",
		(int)px + c->pw - PAD_R + 6, base - fv * scale - 2, fl->mode,
		(int)px + c->pw - PAD_R + 6, val, fl->busy ? "*" : "");
}

static void panel(const struct chart *c, const char *test, unsigned size, double px, double py)
{
	const char *groups[MAX_GROUPS];
	const struct bench_row *fl = panel_floor(c, test, size);
	int ng = panel_groups(c, test, size, groups);
	double fv = fl ? value_of(c, fl) : NAN, top = isnan(fv) ? 0 : fv, step;
	double base = py + PANEL_H - PAD_B, gw;

	if (isnan(fv))
		fl = NULL;
	for (int i = 0; i < c->n; i++)
		if (!c->rows[i].floor && in_panel(&c->rows[i], test, size) &&
		    !isnan(value_of(c, &c->rows[i])))
			top = MAX(top, value_of(c, &c->rows[i]));
	top = nice_top(top * 1.08, &step); /* room for the values above the bars */
	fprintf(c->f, "<g class=\"panel\" data-test=\"%s\" data-size=\"%u\">\n", test, size);
	fprintf(c->f,
		"<text class=\"panel-title\" x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">%s, "
		"%u-byte frames: %s</text>\n",
		px + PAD_L, py + 20, test, size, unit_of(c, test));
	panel_axis(c, px, py, top, step, fl, fv);
	gw = (double)(c->pw - PAD_L - PAD_R) / MAX(ng, 1);
	for (int g = 0; g < ng; g++) {
		group_bars(c, test, size, groups[g], px + PAD_L + g * gw, gw, base,
			   (PANEL_H - PAD_T - PAD_B) / top);
		group_label(c->f, px + PAD_L + (g + 0.5) * gw, base + 16, groups[g]);
	}
	if (!ng)
		fprintf(c->f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#888\">no cells</text>\n",
			px + PAD_L + 10, base - 20);
	fputs("</g>\n", c->f);
}

static void legend(const struct chart *c, double y)
{
	bool have[S_NR] = { false };
	double x = PAD_L;

	for (int i = 0; i < c->n; i++)
		if (!c->rows[i].floor && c->rows[i].group && !c->rows[i].error[0])
			have[series_of(&c->rows[i])] = true;
	for (int s = 0; s < S_NR; s++) {
		if (!have[s])
			continue;
		fprintf(c->f,
			"<rect class=\"legend\" x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" "
			"fill=\"%s\"/>"
			"<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
			x, y - 11, series_info[s].colour, x + 20, y, series_info[s].label);
		x += 34 + 7 * (double)strlen(series_info[s].label);
	}
	fprintf(c->f,
		"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c0392b\" "
		"stroke-width=\"1.5\" "
		"stroke-dasharray=\"6,4\"/><text x=\"%.1f\" y=\"%.1f\">floor (%s)</text>\n",
		x, y - 4, x + 28, y - 4, x + 34, y,
		c->cpu ? "the floor's own host thread"
		       : "the same path without a VM, measured in the same run");
}

static bool has_test(const struct bench_row *rows, int n, const char *test)
{
	for (int i = 0; i < n; i++)
		if (!rows[i].floor && !strcmp(rows[i].test, test))
			return true;
	return false;
}

/* The frame sizes of the cells, in the order they come; and the panels' width: room for the
 * most groups any panel has, each as wide as all the series present. */
static int layout(struct chart *c, unsigned *sizes, int max)
{
	const char *g[MAX_GROUPS];
	bool have[S_NR] = { false };
	int ns = 0, ng = 0, nser = 0;

	for (int i = 0; i < c->n; i++) {
		const struct bench_row *r = &c->rows[i];
		int j;

		if (!r->size || r->floor || r->error[0])
			continue;
		have[series_of(r)] = true;
		for (j = 0; j < ns && sizes[j] != r->size; j++)
			;
		if (j == ns && ns < max)
			sizes[ns++] = r->size;
	}
	for (int s = 0; s < S_NR; s++)
		nser += have[s];
	for (int s = 0; s < ns; s++)
		for (size_t t = 0; t < ARRAY_SIZE(tests); t++)
			ng = MAX(ng, panel_groups(c, tests[t], sizes[s], g));
	c->pw = MAX(PANEL_W, PAD_L + PAD_R + ng * (MAX(nser, 1) * BAR_W + GROUP_GAP));
	return ns;
}

/* The stages' colours, in bench_stages' order: the guest's steps warm, the host's threads cool. */
static const char *const stage_colours[BENCH_NSTAGES] = { "#e6b422", "#d9534f", "#5b8ff9",
							  "#7f7f7f", "#2ca02c", "#17becf",
							  "#9467bd" };

/* A row the breakdown shows: lkvm's rr with lkvm's trace group (-n trace=on). */
static bool traced(const struct bench_row *r)
{
	return !r->error[0] && !r->floor && !r->qemu && !strcmp(r->test, "rr") &&
	       r->trace_transactions > 0;
}

static int ntraced(const struct chart *c)
{
	int k = 0;

	for (int i = 0; i < c->n; i++)
		k += traced(&c->rows[i]);
	return k;
}

/* One traced row's bar at y: its stages' medians end to end from x, then the RTT median the
 * guest measured as a tick (the stages add up to it only roughly: medians of parts). */
static void stage_bar(const struct chart *c, const struct bench_row *r, double x, double y,
		      double scale)
{
	double sum = 0, rtt = r->rtt_med_us;
	char a[32], b[32];

	fprintf(c->f, "<text x=\"%d\" y=\"%.1f\">%s, %u B</text>\n", PAD_L, y + 14, r->mode,
		r->size);
	for (int s = 0; s < BENCH_NSTAGES; s++) {
		double v = isnan(r->stage_p50[s]) ? 0 : r->stage_p50[s] / 1000;

		fprintf(c->f,
			"<rect class=\"stage\" data-mode=\"%s\" data-size=\"%u\" data-stage=\"%s\" "
			"data-value=\"%.3f\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"18\" "
			"fill=\"%s\"/>\n",
			r->mode, r->size, bench_stages[s], v, x + sum * scale, y, v * scale,
			stage_colours[s]);
		sum += v;
	}
	if (!isnan(rtt))
		fprintf(c->f,
			"<line class=\"stage-rtt\" data-value=\"%.3f\" x1=\"%.1f\" y1=\"%.1f\" "
			"x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"2\"/>\n",
			rtt, x + rtt * scale, y - 3, x + rtt * scale, y + 21);
	fmt_value(a, sizeof(a), sum);
	fmt_value(b, sizeof(b), rtt);
	fprintf(c->f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">%s us (RTT %s)</text>\n",
		x + MAX(sum, isnan(rtt) ? 0 : rtt) * scale + 6, y + 14, a, b);
}

/* The breakdown under the panels from y across width: a stacked bar per traced row. */
static void stages_section(const struct chart *c, double y, double width)
{
	double top = 0, x = PAD_L + STAGE_LABEL_W, lx = PAD_L, step;
	int k = 0;

	for (int i = 0; i < c->n; i++) {
		const struct bench_row *r = &c->rows[i];
		double sum = 0;

		if (!traced(r))
			continue;
		for (int s = 0; s < BENCH_NSTAGES; s++)
			sum += isnan(r->stage_p50[s]) ? 0 : r->stage_p50[s] / 1000;
		top = MAX(top, MAX(sum, isnan(r->rtt_med_us) ? 0 : r->rtt_med_us));
	}
	top = nice_top(top * 1.05, &step);
	fprintf(c->f,
		"<g class=\"stages\"><text x=\"%d\" y=\"%.1f\" font-weight=\"bold\">rr by stage "
		"(lkvm -n trace=on): medians, us; the tick: the guest's RTT median</text>\n",
		PAD_L, y + 20);
	for (int s = 0; s < BENCH_NSTAGES; s++) {
		fprintf(c->f,
			"<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/>"
			"<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
			lx, y + 33, stage_colours[s], lx + 20, y + 44, bench_stages[s]);
		lx += 34 + 7 * (double)strlen(bench_stages[s]);
	}
	for (int i = 0; i < c->n; i++)
		if (traced(&c->rows[i]))
			stage_bar(c, &c->rows[i], x, y + STAGE_HEAD_H + STAGE_ROW_H * k++,
				  (width - x - PAD_R - 90) / top);
	fputs("</g>\n", c->f);
}

/* Tests down (tx, rx, rr), frame sizes across; the rates chart ends with the breakdown. */
int bench_svg(FILE *f, const struct bench_row *rows, int n, unsigned secs, const char *host,
	      bool cpu)
{
	struct chart c = { .f = f, .rows = rows, .n = n, .cpu = cpu };
	unsigned sizes[16];
	int ns = layout(&c, sizes, (int)ARRAY_SIZE(sizes)), nt = 0, row = 0;
	int nst = cpu ? 0 : ntraced(&c);
	bool busy = false;

	for (int i = 0; i < n; i++)
		busy |= rows[i].busy;
	for (size_t t = 0; t < ARRAY_SIZE(tests); t++)
		nt += has_test(rows, n, tests[t]);
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"11\">\n",
		c.pw * MAX(ns, 1),
		HEAD_H + PANEL_H * MAX(nt, 1) + (nst ? STAGE_HEAD_H + STAGE_ROW_H * nst + 10 : 0));
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	fprintf(f,
		"<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">lkvm bench net: "
		"%s</text>\n",
		PAD_L,
		cpu ? "host CPU per packet (the VMM's threads but its vCPUs)"
		    : "packet rate and round trip");
	fprintf(f, "<text x=\"%d\" y=\"40\" fill=\"#555\">%u s per cell, host %s%s</text>\n", PAD_L,
		secs, host,
		busy ? "; *: taken while other processes kept the host busy (not a result)" : "");
	legend(&c, 64);
	for (size_t t = 0; t < ARRAY_SIZE(tests); t++) {
		if (!has_test(rows, n, tests[t]))
			continue;
		for (int s = 0; s < ns; s++)
			panel(&c, tests[t], sizes[s], (double)c.pw * s,
			      HEAD_H + (double)PANEL_H * row);
		row++;
	}
	if (nst)
		stages_section(&c, HEAD_H + (double)PANEL_H * MAX(nt, 1),
			       (double)c.pw * MAX(ns, 1));
	fputs("</svg>\n", f);
	return ferror(f) ? -EIO : 0;
}
