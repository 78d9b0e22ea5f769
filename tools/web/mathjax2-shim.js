// The ipywidgets library typesets labels with the MathJax 2 API
// (MathJax.Hub.Queue); the book loads MathJax 3. Whatever object is assigned
// to window.MathJax (the v3 config, then MathJax 3 itself) gets a small Hub
// that forwards to MathJax 3's typesetPromise.
(function () {
  var hub = {
    Queue: function () {
      for (var i = 0; i < arguments.length; i++) {
        var item = arguments[i];
        if (typeof item === "function") { item(); continue; }
        if (Array.isArray(item) && item[0] === "Typeset" && current && current.typesetPromise) {
          current.typesetPromise(item[2] ? [item[2]] : undefined).catch(function () {});
        }
      }
    },
    Config: function () {},
  };
  function withHub(value) {
    if (value && typeof value === "object" && !("Hub" in value)) {
      try { Object.defineProperty(value, "Hub", {value: hub, enumerable: false}); } catch (e) {}
    }
    return value;
  }
  var current = withHub(window.MathJax);
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    get: function () { return current; },
    set: function (value) { current = withHub(value); },
  });
})();
