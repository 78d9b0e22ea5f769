// Loaded before require.js: the widget manager (embed-amd.js) finds its
// fonts through this path, served from the site itself, never from a CDN.
(function () {
  var here = document.currentScript.src.replace(/\/[^\/]*$/, "");
  window.require = {paths: {"@jupyter-widgets/html-manager/dist": here}};
})();
