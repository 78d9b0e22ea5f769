// A formula wider than its column. MathJax 3 cannot break a line inside a formula, and the theme
// clips an inline formula that does not fit (span.math: overflow hidden, so its end was lost at
// phone width, chapter 11's D_i) and lets a displayed one scroll. Here every formula that does not
// fit is set smaller, just enough to fit, but not below a floor (displayed 80 %, inline 60 %); one
// still too wide then scrolls in its own box (an inline one gets the class attnlab-math-scroll),
// which tools/web/tab-stops.js makes reachable by keyboard. The PDF (tools/pdf.py) sets window.attnlabMathFloors lower before it prints
// at the page's width, where nothing can scroll (German chapter 11's "O = AV" was cut at "O =").
// It runs when MathJax has typeset and the fonts are ready, again after the window's width changed,
// and when a folded answer opens.
(function () {
  var SCREEN = {display: 0.8, inline: 0.6};
  function floors() { return window.attnlabMathFloors || SCREEN; }
  function blockWidth(el) {  // the content width of the nearest block around an inline formula
    var block = el.parentElement;
    while (block && /^inline/.test(getComputedStyle(block).display)) block = block.parentElement;
    if (!block) return Infinity;
    var style = getComputedStyle(block);
    return block.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  }
  function fitAll() {
    var all = [].slice.call(document.querySelectorAll("mjx-container"));
    all.forEach(function (el) {  // back to the natural size first (writes only)
      if (el.dataset.attnlabFit) { el.style.fontSize = ""; delete el.dataset.attnlabFit; }
      if (el.parentElement.classList.contains("attnlab-math-scroll")) el.parentElement.classList.remove("attnlab-math-scroll");
    });
    var wide = [];
    all.forEach(function (el) {  // then measure every formula at once (reads only)
      var math = el.querySelector("mjx-math");
      if (!math || !el.offsetParent) return;
      var display = el.getAttribute("display") === "true";
      var need = math.getBoundingClientRect().width;
      var room = display ? el.clientWidth : blockWidth(el);
      if (need > room + 0.5) wide.push([el, display, room / need, parseFloat(getComputedStyle(el).fontSize)]);
    });
    var floor = floors();
    wide.forEach(function (item) {  // and set the smaller sizes (writes only)
      var scale = Math.max(item[2], item[1] ? floor.display : floor.inline);
      item[0].style.fontSize = (item[3] * scale).toFixed(2) + "px";
      item[0].dataset.attnlabFit = scale.toFixed(3);
      if (!item[1] && scale > item[2]) item[0].parentElement.classList.add("attnlab-math-scroll");  // still too wide
    });
    window.dispatchEvent(new Event("attnlab-math-fitted"));  // tab-stops.js looks again
    return wide.length;
  }
  window.attnlabFitMath = fitAll;
  var timer = null, width = window.innerWidth;
  window.addEventListener("resize", function () {
    if (window.innerWidth === width) return;  // a phone's toolbar changes only the height
    width = window.innerWidth;
    clearTimeout(timer);
    timer = setTimeout(fitAll, 150);
  });
  // a formula inside a folded answer has no width until the reader opens it
  document.addEventListener("toggle", function (event) { if (event.target.open) fitAll(); }, true);
  window.addEventListener("load", function () {
    var typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
    var fonts = document.fonts && document.fonts.ready;
    Promise.all([typeset, fonts]).then(function () { fitAll(); window.attnlabMathFitted = true; });
  });
})();
