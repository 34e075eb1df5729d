// What a reader sees cut off or overlapping on the page: one line per problem.
() => {
  const problems = [];
  const visible = (el) => el.offsetParent !== null || el.getClientRects().length > 0;
  const meets = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  for (const el of document.querySelectorAll('[data-testid="stMain"] *, [data-testid="stSidebar"] *')) {
    if (getComputedStyle(el).textOverflow === 'ellipsis' && el.scrollWidth > el.clientWidth + 1 && visible(el)
        && el.textContent.trim()) {
      problems.push('cut off: ' + el.textContent.trim().slice(0, 60));
    }
  }
  const textBox = (el) => { const range = document.createRange(); range.selectNodeContents(el); return range.getBoundingClientRect(); };
  for (const figure of document.querySelectorAll('.ss-figure')) {  // sinkscope.plot.html_figures
    const frame = figure.getBoundingClientRect();
    for (const part of figure.querySelectorAll('figcaption, .ss-body > *, .ss-bar > span')) {
      const box = textBox(part);
      if (box.width && (box.right > frame.right + 1 || box.left < frame.left - 1)) {
        problems.push('wider than its figure: ' + (part.textContent.trim().slice(0, 60) || part.className));
      }
    }
    const cells = figure.querySelectorAll('.ss-cells > i'), rows = figure.querySelectorAll('.ss-y-ticks > span');
    if (cells.length && rows.length) {
      const [last, label] = [cells[cells.length - 1].getBoundingClientRect(), textBox(rows[rows.length - 1])];
      const middle = (label.top + label.bottom) / 2;
      if (middle < last.top || middle > last.bottom) {
        problems.push('layer labels beside the wrong rows: ' + figure.querySelector('figcaption').textContent);
      }
    }
    for (const ticks of figure.querySelectorAll('.ss-x-ticks, .ss-y-ticks, .ss-bar, .ss-legend')) {
      const labels = [...ticks.children].filter((t) => t.textContent);
      for (let i = 1; i < labels.length; i++) {
        if (meets(textBox(labels[i - 1]), textBox(labels[i]))) {
          problems.push(`labels overlap: ${labels[i - 1].textContent} / ${labels[i].textContent}`);
          break;
        }
      }
    }
  }
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const frame = plot.getBoundingClientRect();
    const marks = [...plot.querySelectorAll('.nsewdrag, .xtick text, .ytick text')];  // plot areas and tick labels
    for (const title of plot.querySelectorAll('.gtitle, .gtitle-subtitle')) {
      const box = title.getBoundingClientRect();
      if (box.width && (box.right > frame.right + 1 || box.left < frame.left - 1)) {
        problems.push('title wider than its figure: ' + title.textContent.slice(0, 60));
      }
      if (box.width && marks.some((mark) => meets(box, mark.getBoundingClientRect()))) {
        problems.push('title over the plot or its ticks: ' + title.textContent.slice(0, 60));
      }
    }
    for (const [axis, selector] of [['x', '.xtick text'], ['y', '.ytick text']]) {
      const ticks = [...plot.querySelectorAll(selector)].filter((t) => t.textContent);
      for (let i = 1; i < ticks.length; i++) {
        const [a, b] = [ticks[i - 1], ticks[i]];
        const rotation = (a.getAttribute('transform') || '').split('rotate(')[1] || '0';
        const angle = Math.abs(parseFloat(rotation)) * Math.PI / 180;
        const size = parseFloat(getComputedStyle(a).fontSize);
        // tick positions, from plotly's translate(x,y): a rotated label's box is not centred on its tick
        const at = (t) => (t.getAttribute('transform') || 'translate(0,0)').match(/translate\(([-\d.]+),([-\d.]+)\)/).slice(1);
        const [ta, tb] = [at(a), at(b)];
        const gap = Math.abs(axis === 'x' ? ta[0] - tb[0] : ta[1] - tb[1]);
        const along = (a.getComputedTextLength() + b.getComputedTextLength()) / 2;
        const apart = axis === 'x' ? (gap * Math.sin(angle) >= 0.9 * size || gap * Math.cos(angle) >= along)
                                   : gap >= 0.9 * size;
        if (!apart) { problems.push(`${axis} labels overlap: ${a.textContent} / ${b.textContent}`); break; }
      }
    }
    const legend = plot.querySelector('.legend');
    for (const title of plot.querySelectorAll('.xtitle, .ytitle')) {
      if (legend && meets(legend.getBoundingClientRect(), title.getBoundingClientRect())) {
        problems.push('legend over the axis title: ' + title.textContent);
      }
    }
  }
  for (const scroller of document.querySelectorAll('[data-testid="stDataFrame"] .dvn-scroller')) {
    if (scroller.scrollWidth > scroller.clientWidth + 1) {  // columns only a sideways scroll reaches
      problems.push('table wider than its frame: ' + scroller.closest('[data-testid="stDataFrame"]').textContent.slice(0, 40));
    }
  }
  return problems;
}
