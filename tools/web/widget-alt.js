// Widget frames are <img> elements that the widget manager draws from the widget
// state, and ipywidgets' Image has no alt text. Each frame gets one here, in the
// page's language, from what the reader sees with it: the explorer's caption and
// the value of each of its controls (the one pressed in each button group), so
// the text follows the frame when a control changes it.
(function () {
  function text(el) { return el ? el.textContent.replace(/\s+/g, " ").trim() : ""; }
  function describe(img) {
    var root = img.closest(".widget-subarea") || img.closest(".cell_output") || img.parentElement;
    var captions = [].map.call(root.querySelectorAll(".widget-html-content"), text).filter(Boolean);
    var parts = [captions[0] || ""];
    root.querySelectorAll(".widget-toggle-buttons").forEach(function (group) {
      var label = text(group.querySelector(".widget-label"));
      var pressed = text(group.querySelector("button.mod-active"));
      if (pressed) parts.push(label ? label + " " + pressed : pressed);
    });
    return parts.filter(Boolean).join(" · ");
  }
  function update() {
    document.querySelectorAll("img.widget-image").forEach(function (img) {
      var alt = describe(img);
      if (alt && img.getAttribute("alt") !== alt) img.setAttribute("alt", alt);
    });
  }
  new MutationObserver(update).observe(document.documentElement,
    {subtree: true, childList: true, attributes: true, attributeFilter: ["class", "src"]});
  document.addEventListener("DOMContentLoaded", update);
})();
