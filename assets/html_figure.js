// A figure of sinkscope.plot.html_figures in the page: hover text follows the pointer at once (the browser's own
// tooltip waits a second), a click on a head map cell reports that head, and a click (or Enter, or Space) on a token
// of the lit text reports its position.
const drawn = new WeakMap(); // root -> the markup it shows: a rerun with the same figure leaves the page as it is

function draw(root, markup) {
  root.innerHTML = markup;
  for (const part of root.querySelectorAll("[title]")) {
    part.dataset.tip = part.title;
    part.removeAttribute("title");
  }
  const tip = document.createElement("div");
  tip.className = "ss-figure-tip";
  tip.hidden = true;
  root.append(tip);
  drawn.set(root, markup);
}

function follow(root, event) {
  const tip = root.querySelector(".ss-figure-tip");
  const part = event.target.closest("[data-tip]");
  tip.hidden = !part;
  if (!part) return;
  tip.textContent = part.dataset.tip;
  const pastRight = event.clientX + 14 + tip.offsetWidth > window.innerWidth;
  tip.style.left = `${pastRight ? event.clientX - 14 - tip.offsetWidth : event.clientX + 14}px`;
  tip.style.top = `${Math.max(4, Math.min(event.clientY + 14, window.innerHeight - tip.offsetHeight - 4))}px`;
}

export default function ({ data, parentElement, setTriggerValue }) {
  const root = parentElement.querySelector(".ss-figure-root");
  if (drawn.get(root) !== data.html) draw(root, data.html);
  root.classList.toggle("ss-clickable", data.clickable);
  root.onpointermove = (event) => follow(root, event);
  root.onpointerleave = () => (root.querySelector(".ss-figure-tip").hidden = true);
  root.onclick = (event) => {
    const cell = event.target.closest("[data-head]");
    if (cell && data.clickable) {
      setTriggerValue("clicked", { layer: Number(cell.dataset.layer), head: Number(cell.dataset.head) });
    }
    pick(event, data, setTriggerValue);
  };
  root.onkeydown = (event) => {
    if (event.key === "Enter" || event.key === " ") pick(event, data, setTriggerValue);
  };
}

function pick(event, data, setTriggerValue) {
  const token = event.target.closest("[data-query]");
  if (!token || !data.clickable) return;
  event.preventDefault();
  setTriggerValue("picked", { query: Number(token.dataset.query) });
}
