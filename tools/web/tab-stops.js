// A code block, output, table or formula that scrolls needs a tab stop, so that a keyboard user can
// reach and scroll it (axe: scrollable-region-focusable). The theme (pydata-sphinx-theme.js,
// addTabStopsToScrollableElements) sets them on the window's load event, on a resize and 0.3 s
// after nodes are added under #main-content; a block that starts to overflow later without such
// a change (web fonts arriving after the load event, MathJax's typesetting, the sidebars settling
// on a slow machine) keeps tabIndex -1 and cannot be scrolled from the keyboard. Here the same
// rule runs again whenever one of these elements changes size, when the fonts are ready, when
// MathJax has typeset and when fit-math.js has sized the formulas.
(function () {
  var SELECTOR = "pre, .nboutput > .output_area, .cell_output > .output, .jp-RenderedHTMLCommon, " +
                 ".pst-scrollable-table-container, mjx-container[display='true'], span.math.attnlab-math-scroll";
  window.attnlabScrollers = SELECTOR;  // the browser tests wait for these before axe looks
  function apply(el) {
    if (!el.matches(SELECTOR)) return;
    var scrolls = el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight;
    if (scrolls && el.tabIndex !== 0) el.tabIndex = 0;
    else if (!scrolls && el.tabIndex === 0 && el.getAttribute("tabindex") === "0") el.tabIndex = -1;
  }
  function all() { document.querySelectorAll(SELECTOR).forEach(apply); }
  var watched = new WeakSet();
  var owner = new WeakMap();  // a watched element's first child -> the element (never the child itself:
                              // a formula's inner mjx-math, aria-hidden, must not get a tab stop)
  var sizes = typeof ResizeObserver === "function" ?
    new ResizeObserver(function (entries) {
      entries.forEach(function (e) { apply(owner.get(e.target) || e.target); });
    }) : null;
  function watch() {
    all();
    if (!sizes) return;
    document.querySelectorAll(SELECTOR).forEach(function (el) {
      if (watched.has(el)) return;
      watched.add(el);
      sizes.observe(el);
      // the element's own box may keep its size while its content grows (a font swap in a <pre>)
      if (el.firstElementChild) { owner.set(el.firstElementChild, el); sizes.observe(el.firstElementChild); }
    });
  }
  window.addEventListener("load", function () {
    watch();
    new MutationObserver(watch).observe(document.getElementById("main-content") || document.body,
                                        {subtree: true, childList: true});
    if (document.fonts && document.fonts.ready) document.fonts.ready.then(all);
    if (document.fonts) document.fonts.addEventListener("loadingdone", all);
    var typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
    if (typeset) typeset.then(all);
    window.addEventListener("attnlab-math-fitted", watch);  // fit-math.js sized the formulas anew
  });
})();
