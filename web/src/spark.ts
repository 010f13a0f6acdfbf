// Sparklines: a small SVG line of recent values.

const svgNS = 'http://www.w3.org/2000/svg'
const width = 110
const height = 26

// Spark is one sparkline, redrawn in place.
export class Spark {
  readonly el: SVGSVGElement
  private line: SVGPolylineElement
  private area: SVGPolygonElement

  constructor(readonly cls: string) {
    this.el = document.createElementNS(svgNS, 'svg')
    this.el.setAttribute('viewBox', `0 0 ${width} ${height}`)
    this.el.setAttribute('width', String(width))
    this.el.setAttribute('height', String(height))
    this.el.setAttribute('class', `spark ${cls}`)
    this.area = document.createElementNS(svgNS, 'polygon')
    this.line = document.createElementNS(svgNS, 'polyline')
    this.el.append(this.area, this.line)
  }

  // draw plots values (oldest first) against max, the top of the box.
  draw(values: number[], max: number): void {
    if (values.length === 0 || !(max > 0)) {
      this.line.setAttribute('points', '')
      this.area.setAttribute('points', '')
      return
    }
    const step = values.length > 1 ? width / (values.length - 1) : 0
    const pts = values.map((v, i) => {
      const y = height - 1 - (Math.min(Math.max(v, 0), max) / max) * (height - 2)
      return `${(i * step).toFixed(1)},${y.toFixed(1)}`
    })
    if (values.length === 1) pts.push(`${width},${pts[0].split(',')[1]}`)
    this.line.setAttribute('points', pts.join(' '))
    const last = values.length === 1 ? width : (values.length - 1) * step
    this.area.setAttribute('points', `0,${height} ${pts.join(' ')} ${last.toFixed(1)},${height}`)
  }
}
