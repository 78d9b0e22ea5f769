// Loaded before require.js: the widget manager (embed-amd.js) finds its
// fonts through these paths, served from the site itself, never from a CDN.
// embed-amd.js defines six named AMD modules, and webpack takes each one's
// public path (where its CSS finds its Font Awesome files) from the module's
// own RequireJS URL. A module without a path here gets the page's folder as
// that URL (RequireJS's baseUrl), so its @font-face pointed under the page:
// whichever module's rule the browser met first when an icon was drawn was
// fetched, a timing race that showed when several pages loaded at once.
(function () {
  var here = document.currentScript.src.replace(/\/[^\/]*$/, "");
  var paths = {"@jupyter-widgets/html-manager/dist": here};
  ["base", "controls", "base7", "controls7", "html-manager"].forEach(function (name) {
    paths["@jupyter-widgets/" + name] = here + "/" + name;
  });
  window.require = {paths: paths};
})();
