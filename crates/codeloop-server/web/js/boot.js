// Runs before the page's modules have loaded: when this tab comes back to the session it had open (a
// reload), the session and its newest messages are asked for at once, and main.js takes the answers.
// The stream then resumes from where the last page stopped, so reading the session early misses nothing.
'use strict';
(function early() {
  try {
    const route = /^#\/session\/([A-Za-z0-9_-]+)/.exec(location.hash);
    const resume = JSON.parse(sessionStorage.getItem('codeloop.resume') || 'null');
    if (!route || !resume || resume.session !== route[1]) return;
    const token = sessionStorage.getItem('codeloop.token');
    const headers = token ? {Authorization: 'Bearer ' + token} : {};
    const get = (path) => fetch(path, {headers, cache: 'no-store', credentials: 'omit'});
    const limit = 16;
    window.codeloopEarly = {
      session: route[1],
      limit,
      info: get('/session/' + route[1]),
      page: get('/session/' + route[1] + '/message?limit=' + limit),
    };
  } catch {
    // Without it, main.js asks itself.
  }
})();
