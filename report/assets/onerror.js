// Records script errors on <body> for the browser test: data-script-errors is
// "<count>: <messages>" after an error, and "0" once loaded without one. report.html and
// the nightly summary.html start their body with it.
(function () {
  var errors = [];
  window.onerror = function (message, source, line, column) {
    errors.push(String(message) + " (" + line + ":" + column + ")");
    if (document.body) {
      document.body.dataset.scriptErrors = errors.length + ": " + errors.join("; ");
    }
  };
  window.addEventListener("load", function () {
    if (errors.length === 0) { document.body.dataset.scriptErrors = "0"; }
  });
})();
