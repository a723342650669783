// timeline.html, first in <head>: records script errors in body[data-script-errors] as
// "<count>: <messages>"; timeline.js sets "0" once drawn without one.
window.tlErrors = [];
window.onerror = function (message, source, line, column) {
  window.tlErrors.push(String(message) + " (" + line + ":" + column + ")");
  var record = function () {
    document.body.dataset.scriptErrors = window.tlErrors.length + ": " + window.tlErrors.join("; ");
  };
  if (document.body) { record(); } else { document.addEventListener("DOMContentLoaded", record); }
};
